"""Arrow tables in and out of order: reading JSONL/Parquet records with errors that name the file, record and
field (``records``), sorting by key columns (``ordering``)."""
