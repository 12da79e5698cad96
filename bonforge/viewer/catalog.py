"""The viewer's DuckDB catalog: the same views as `bonforge sql` (``bonforge.storage.catalog``), opened once
per run and locked down before any query runs.

The connection's ``runs`` and ``run_stages`` tables are copied into the database (registered Arrow tables
are seen by the connection that registered them only, and each request queries through its own cursor);
then external access is switched off, only the store's folder stays readable, and the configuration is
locked, so that no query (the SQL box's included) reads another file, installs an extension or undoes
the settings.
"""

from __future__ import annotations

import threading

from bonforge.errors import StoreError
from bonforge.storage.catalog import connect
from bonforge.storage.store import StageStore


class NotFound(StoreError):
    """What a request names (a run, a stage, a problem) is not in the store."""


class Catalog:
    """Hardened catalog connections of a store, one per run, reopened when the run's record changes (a
    build that was running has finished)."""

    def __init__(self, store: StageStore):
        self.store = store
        self._open: dict[str, tuple[str, object]] = {}
        self._lock = threading.Lock()

    def runs(self) -> list[dict]:
        return self.store.runs()

    def run(self, run_id: str | None) -> dict:
        try:
            return self.store.run(run_id or None)
        except StoreError as e:
            raise NotFound(str(e)) from None

    def cursor(self, run: dict):
        """A cursor of the run's locked connection (each request gets its own)."""
        stamp = f"{run.get('status')}|{run.get('finished')}|{sorted(run.get('stages', {}))}"
        with self._lock:
            held = self._open.get(run["run_id"])
            if held is None or held[0] != stamp:
                held = (stamp, self._connect(run["run_id"]))
                self._open[run["run_id"]] = held
            return held[1].cursor()

    def _connect(self, run_id: str):
        con = connect(self.store, run_id)
        for name in ("runs", "run_stages"):
            table = con.table(name).to_arrow_table()
            con.unregister(name)
            con.from_arrow(table).create(name)
        con.execute("SET allowed_directories = ?", [[str(self.store.root).rstrip("/") + "/"]])
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        return con


def views(cur) -> set[str]:
    """The stage views (and tables) a run's catalog has."""
    return {name for (name,) in cur.sql("SELECT table_name FROM information_schema.tables").fetchall()}


def need(cur, run: dict, *stages: str) -> None:
    """Raise NotFound naming the first of ``stages`` the run does not have."""
    have = views(cur)
    for stage in stages:
        if stage not in have:
            raise NotFound(f"run {run['run_id']} has no {stage!r} stage")
