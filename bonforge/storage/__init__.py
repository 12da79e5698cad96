"""Stage store (Parquet shards + manifests), run records, DuckDB catalog and dataset versions."""
