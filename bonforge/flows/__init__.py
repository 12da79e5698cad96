"""Prefect flows: `build.py` reads like the DAG, one stage per line."""
