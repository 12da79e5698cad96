"""What a bonforge process holds once and asks of its host: its Ray connection (``cluster``), its progress bars
(``progress``), its scratch DuckDB database (``scratch_db``), and whether a process still runs (``processes``)."""
