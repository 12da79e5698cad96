"""The SQL box's queries run in a worker process of their own, one per open run, whose memory the kernel
bounds (``RLIMIT_DATA``): DuckDB's memory limit binds its buffer-managed memory only, not the vectors a
function fills (``repeat``, ``range``, ``string_agg``: 2,048 rows of a 2 MB value are 4 GB before the first
row reaches Arrow), so a byte cap checked on fetched rows alone comes too late.

The worker opens the run's locked catalog connection as the viewer does (``Catalog.open_locked``), runs
each query with ``bonforge.viewer.sql.select`` (time limit, row cap, byte cap checked batch by batch) and
sends back the result as Arrow IPC, at most ``result_bytes`` of it. Its address space is bounded to
DuckDB's memory limit plus the result cap plus ``BASE_BYTES`` (interpreter, libraries); past it an
allocation fails inside the worker and the query is refused with one line. The viewer process holds at
most the result; a worker that dies (killed, crashed) is replaced at the next query. As with the catalog's
connections, at most ``MAX_OPEN`` runs keep a worker.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
from multiprocessing.connection import Connection

import duckdb
import pyarrow as pa

from bonforge.errors import BonforgeError
from bonforge.viewer.catalog import MAX_OPEN, open_locked
from bonforge.viewer.sql import Limits, QueryError, line, select, size

BASE_BYTES = 768 << 20  # the worker's interpreter, DuckDB, Arrow and their threads' stacks
START_S = 60.0  # a worker's start (imports, the catalog's views) on a loaded machine


def memory_bound(limits: Limits) -> int:
    """The most memory a worker may map: DuckDB's limit, the result (twice: rows and their IPC copy), the base."""
    return limits.memory_bytes + 2 * limits.result_bytes + BASE_BYTES


def _too_big(limits: Limits) -> str:
    return (f"the query needs more memory than the viewer allows ({size(memory_bound(limits))} for a query and its "
            "result): select fewer rows or columns, or smaller values")


class SqlWorkers:
    """The workers of the runs the SQL box queries, one per run (a run whose record changed gets a new one)."""

    def __init__(self, store_root: str, cache: str, limits: Limits):
        self.store_root, self.cache, self.limits = store_root, cache, limits
        self._workers: dict[str, SqlWorker] = {}
        self._lock = threading.Lock()

    def query(self, run, text: str, cap: int) -> tuple[pa.Table, bool]:
        """Run ``text`` over ``run``'s catalog: (at most ``cap`` rows, whether there were more)."""
        stamp = f"{run.status}|{run.finished}|{sorted(run.stages)}"
        with self._lock:
            worker = self._workers.pop(run.run_id, None)
            if worker is not None and worker.stamp != stamp:
                worker.stop()
                worker = None
            self._workers[run.run_id] = worker = worker or SqlWorker(self.store_root, run.run_id, self.cache,
                                                                     self.limits, stamp)
            while len(self._workers) > MAX_OPEN:  # the least recently used first
                self._workers.pop(next(iter(self._workers))).stop()
        return worker.query(text, cap)

    def close(self) -> None:
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        for worker in workers:
            worker.stop()


class SqlWorker:
    """One run's worker process (``python -m bonforge.viewer.sql_worker``, its pipes framed by
    ``multiprocessing.connection``); ``query`` runs one query at a time, starting a worker where none runs."""

    def __init__(self, store_root: str, run_id: str, cache: str, limits: Limits, stamp: str = ""):
        self.args = (store_root, run_id, cache, limits)
        self.limits, self.stamp = limits, stamp
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None

    def query(self, text: str, cap: int) -> tuple[pa.Table, bool]:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            try:
                self._send.send((text, cap))
                if not self._recv.poll(self.limits.time_s + START_S):
                    self.stop()
                    raise QueryError(f"the query ran past the {self.limits.time_s:g} s limit and was stopped")
                kind, value, more = self._recv.recv()
            except (EOFError, OSError):  # the worker ended mid-query: killed (its memory), or it crashed
                code = self.stop()
                why = _too_big(self.limits) if code is not None and code < 0 else "see the viewer's log"
                raise QueryError(f"the query ended its worker (exit code {code}): {why}") from None
        if kind == "error":
            raise QueryError(value)
        return pa.ipc.open_stream(value).read_all(), more

    def _start(self) -> None:
        self._proc = subprocess.Popen([sys.executable, "-m", "bonforge.viewer.sql_worker"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, start_new_session=True)  # Ctrl-C is the viewer's
        self._send = Connection(os.dup(self._proc.stdin.fileno()), readable=False)
        self._recv = Connection(os.dup(self._proc.stdout.fileno()), writable=False)
        self._proc.stdin.close()
        self._proc.stdout.close()
        self._send.send(self.args)

    def stop(self) -> int | None:
        """Stop the worker; its exit code (None where none ran)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        proc.kill()
        self._send.close()
        self._recv.close()
        return proc.wait()


def _serve() -> None:
    """The worker: read its run, bound its memory, open the run's locked connection, answer queries until
    its input closes. Its results go to stdout only through the pipe's frames (nothing else prints there)."""
    from bonforge.storage.store import StageStore

    recv = Connection(os.dup(0), writable=False)
    send = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)  # anything a library prints goes to stderr, never into the frames
    store_root, run_id, cache, limits = recv.recv()
    bound = memory_bound(limits)
    resource.setrlimit(resource.RLIMIT_DATA, (bound, bound))
    try:
        con, broken = open_locked(StageStore(store_root), run_id, cache, limits.memory_bytes), None
    except (BonforgeError, duckdb.Error, OSError) as e:  # each query says why the catalog did not open
        con, broken = None, f"the run's catalog did not open: {line(e)}"
    while True:
        try:
            text, cap = recv.recv()
        except EOFError:
            return
        try:
            if broken:
                raise QueryError(broken)
            table, more = select(con.cursor(), text, limits, cap)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as out:
                out.write_table(table)
            send.send(("ok", sink.getvalue(), more))
        except QueryError as e:
            send.send(("error", str(e), False))
        except MemoryError:
            send.send(("error", _too_big(limits), False))


if __name__ == "__main__":
    _serve()
