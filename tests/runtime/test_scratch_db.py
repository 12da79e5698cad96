"""The process's scratch DuckDB database: one per process, a connection of its own per use, safe across fork."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import duckdb
import numpy as np
import pyarrow as pa

from bonforge import identity
from bonforge.runtime import scratch_db
from bonforge.engine import reuse


def test_the_hot_queries_open_no_database_per_call(monkeypatch):
    values = pa.array([b"a" * 32, b"b" * 32])
    reuse.match(values, values)  # the scratch database is open from here on
    opened = []
    real = duckdb.connect
    monkeypatch.setattr(duckdb, "connect", lambda *a, **kw: opened.append(a) or real(*a, **kw))
    for _ in range(3):
        assert reuse.match(pa.array([b"b" * 32, b"c" * 32]), values).tolist() == [1, -1]
        identity.sha256([pa.array(["x", None])])
    assert opened == []  # ~15 ms each: a build's look-up ran several per window


def test_each_cursor_sees_only_its_own_tables():
    with scratch_db.cursor() as a, scratch_db.cursor() as b:
        a.register("t", pa.table({"v": [1, 2]}))
        b.register("t", pa.table({"v": [3]}))
        assert a.sql("SELECT sum(v), count(*) FROM t").fetchall() == [(3, 2)]
        assert b.sql("SELECT sum(v), count(*) FROM t").fetchall() == [(3, 1)]


def test_threads_match_side_by_side():
    values = pa.array([f"{i:040d}".encode() for i in range(20_000)])
    wrong = []

    def work(seed: int) -> None:
        pick = np.random.default_rng(seed).integers(0, 40_000, 5_000)
        wanted = pa.array([f"{i:040d}".encode() for i in pick])
        if reuse.match(wanted, values).tolist() != np.where(pick < 20_000, pick, -1).tolist():
            wrong.append(seed)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_a_forked_child_opens_its_own_database():
    script = textwrap.dedent("""
        import os, pyarrow as pa
        from bonforge.engine import reuse
        values = pa.array([b"a" * 32, b"b" * 32])
        assert reuse.match(values, values).tolist() == [0, 1]
        pid = os.fork()
        if pid == 0:
            ok = reuse.match(pa.array([b"b" * 32]), values).tolist() == [1]
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert reuse.match(pa.array([b"a" * 32]), values).tolist() == [0]
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_a_fork_while_another_thread_queries_leaves_its_query_alone():
    """A streaming build's threads query while another forks (Ray, a sandbox's docker client): the query goes
    on, and the child still opens its own database."""
    script = textwrap.dedent("""
        import os, threading
        from bonforge.runtime import scratch_db
        out, started = [], threading.Event()
        def query():
            with scratch_db.cursor() as cur:
                started.set()
                out.append(cur.sql("SELECT count(*) FROM range(400000000) a WHERE a.range % 7 = 1").fetchall())
        t = threading.Thread(target=query)
        t.start()
        started.wait()
        pid = os.fork()
        if pid == 0:
            with scratch_db.cursor() as cur:
                os._exit(0 if cur.sql("SELECT 41 + 1").fetchall() == [(42,)] else 3)
        _, status = os.waitpid(pid, 0)
        t.join()
        assert os.waitstatus_to_exitcode(status) == 0
        assert out == [[(57142857,)]], out
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
