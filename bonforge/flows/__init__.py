"""The build's DAG (``build.py``, plain Python over stage nodes), its recorded-run analyses (``insight.py``)
and Prefect deployments of it (``deploy.py``)."""
