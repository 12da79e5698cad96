"""One in-memory DuckDB database per process for short queries over Arrow tables (the row identities'
hashing, the reuse look-up's joins). Opening a database costs ~15 ms; a cursor of an open one ~0.2 ms, and a
build runs such queries per shard window.

Each ``cursor()`` is a connection of its own (its registered tables are its own: threads do not see each
other's). Before the process forks, the database is closed, so a forked child opens its own rather than
inheriting one whose worker threads it does not have."""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Iterator

import duckdb

_lock = threading.Lock()
_db: duckdb.DuckDBPyConnection | None = None


@contextlib.contextmanager
def cursor() -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to this process's scratch database, closed on exit."""
    global _db
    with _lock:
        if _db is None:
            _db = duckdb.connect()
        cur = _db.cursor()
    try:
        yield cur
    finally:
        cur.close()


def _close_before_fork() -> None:
    global _db
    with _lock:
        if _db is not None:
            _db.close()  # cursors still open keep it alive until they close
            _db = None


os.register_at_fork(before=_close_before_fork)
