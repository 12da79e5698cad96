"""What a bonforge process holds once and asks of its host: its Ray connection (``cluster``), its progress bars
(``progress``), its scratch DuckDB database (``scratch_db``), whether a process still runs (``processes``), and
where its per-user files and caches live (``folders``)."""
