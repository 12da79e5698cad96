"""`bonforge up`: the warm builder (a forked, preloaded interpreter) and the Prefect and Ray services it keeps running."""
