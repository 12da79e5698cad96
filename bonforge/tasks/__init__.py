"""One module per stage: plain functions over Arrow tables (no Ray, no Prefect)."""
