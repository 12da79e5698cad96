"""What a bonforge process holds once: its Ray connection (``cluster``), its progress bars (``progress``) and
its scratch DuckDB database (``scratch_db``)."""
