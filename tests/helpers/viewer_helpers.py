"""Helpers of the viewer tests: a test client that sends the page's key, a small store that needs no build
(one run with problems and problem_stats), and a live `bonforge view` of a store (for the Chromium tests)."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pyarrow as pa
from starlette.testclient import TestClient

from bonforge.storage.store import StageStore
from bonforge.storage.run_record import RunRecord

PROBLEMS = 6


def small_store(root) -> tuple[StageStore, str]:
    """(store, run id) of one succeeded run over ``PROBLEMS`` maths problems."""
    store = StageStore(root)
    ids = [f"p{i}" for i in range(PROBLEMS)]
    store.write_shard("problems", "kp", 0, pa.table({
        "problem_id": ids, "domain": ["math"] * PROBLEMS, "source": ["t"] * PROBLEMS,
        "question": [f"What is {i} + {i}?" for i in range(PROBLEMS)], "answer": [str(2 * i) for i in range(PROBLEMS)]}))
    store.commit("problems", "kp", 1, version="1", config={}, upstream={})
    n = 2 * PROBLEMS  # one row per problem of teacher t1, one of all teachers ("*")
    store.write_shard("problem_stats", "ks", 0, pa.table({
        "problem_id": ids * 2, "teacher": ["t1"] * PROBLEMS + ["*"] * PROBLEMS, "n": [4] * n,
        "n_correct": [i % 5 for i in range(PROBLEMS)] * 2, "pass_rate": [(i % 5) / 4 for i in range(PROBLEMS)] * 2,
        "pass_at_k": [None] * n, "majority_at_k": [None] * n, "keep": [True] * n, "drop_reason": [None] * n},
        schema=pa.schema([("problem_id", pa.string()), ("teacher", pa.string()), ("n", pa.int64()),
                          ("n_correct", pa.int64()), ("pass_rate", pa.float64()),
                          ("pass_at_k", pa.map_(pa.string(), pa.float64())),
                          ("majority_at_k", pa.map_(pa.string(), pa.float64())), ("keep", pa.bool_()),
                          ("drop_reason", pa.string())])))  # fmt: skip
    store.commit("problem_stats", "ks", 1, version="1", config={}, upstream={})
    store.record_run(RunRecord.from_json({"run_id": "run1", "recipe_name": "small", "status": "succeeded",
                      "started": "2026-01-01T00:00:00Z", "stages": {"problems": ["kp"], "problem_stats": ["ks"]}}))
    return store, "run1"


def page_client(app, base_url: str = "http://127.0.0.1", **kw) -> TestClient:
    """A test client of ``app`` whose requests carry the page's key, as the viewer's own page sends it."""
    return TestClient(app, base_url=base_url, headers={"X-Bonforge-Key": app.state.key}, **kw)


@contextlib.contextmanager
def serving(root, log: Path):
    """`bonforge view` serving the store at ``root`` on a free loopback port (its output in ``log``); yields its
    URL once it answers, and ends its process group after."""
    import httpx
    from procs import free_port, kill_group, start

    port = free_port()
    repo = Path(__file__).resolve().parents[2]
    proc = start(["-m", "bonforge", "view", "--store", str(root), "--port", str(port)],
                 env={**os.environ, "PYTHONPATH": str(repo), "PYTHONUNBUFFERED": "1"}, log=log)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        assert f"bonforge view: {url}" in log.read_text()
        yield url
    finally:
        kill_group(proc)
