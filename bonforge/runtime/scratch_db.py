"""One in-memory DuckDB database per process for short queries over Arrow tables (the row identities'
hashing, the reuse look-up's joins). Opening a database costs ~15 ms; a cursor of an open one ~0.2 ms, and a
build runs such queries per shard window.

Each ``cursor()`` is a connection of its own (its registered tables are its own: threads do not see each
other's). Before the process forks, the database is closed unless a cursor is in use (another thread's query,
which closing would break); either way a forked child opens its own rather than using one whose worker threads
it does not have."""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Iterator

import duckdb

_lock = threading.Lock()
_db: duckdb.DuckDBPyConnection | None = None
_in_use = 0  # cursors open


@contextlib.contextmanager
def cursor() -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to this process's scratch database, closed on exit."""
    global _db, _in_use
    with _lock:
        if _db is None:
            _db = duckdb.connect()
        cur = _db.cursor()
        _in_use += 1
    try:
        yield cur
    finally:
        cur.close()
        with _lock:
            _in_use -= 1


def _close_before_fork() -> None:
    global _db
    with _lock:
        if _db is not None and not _in_use:
            _db.close()
            _db = None


def _own_in_child() -> None:
    """The forked child's state: no database yet (the parent's, if open, is not the child's to use or close) and
    a lock no thread holds."""
    global _lock, _db, _in_use
    _lock, _db, _in_use = threading.Lock(), None, 0


os.register_at_fork(before=_close_before_fork, after_in_child=_own_in_child)
