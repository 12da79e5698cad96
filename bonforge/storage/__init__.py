"""Stage store (Parquet shards + manifests), DuckDB catalog and dataset versions."""
