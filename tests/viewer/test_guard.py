"""The viewer's guards, over a small store (no build): a query has a memory limit and its result a byte cap
(one-line 400 past either), and the API answers the viewer's own page only (the page's key, same-origin
``Sec-Fetch-Site`` and ``Origin``, JSON bodies), while the Host check against DNS rebinding holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from viewer_helpers import small_store
from starlette.testclient import TestClient
from typer.testing import CliRunner

from bonforge.cli import app as cli
from bonforge.viewer.app import create_app
from bonforge.viewer.sql import Limits
from bonforge.viewer.views import BadRequest
from bonforge.viewer.sql_worker import memory_bound

KEY = "page-key-for-tests"
OWN = {"X-Bonforge-Key": KEY}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return small_store(tmp_path_factory.mktemp("guard") / "store")[0]


def client(store, limits: Limits = Limits(), base_url: str = "http://127.0.0.1:8765", **kw) -> TestClient:
    return TestClient(create_app(store, copies=False, limits=limits, key=KEY, **kw), base_url=base_url)


def refused(res, status: int, *words: str) -> str:
    assert res.status_code == status, res.text
    message = res.json()["error"]
    assert "\n" not in message and "Traceback" not in message
    for word in words:
        assert word in message, message
    return message


# -- limits --------------------------------------------------------------------------------------------


def test_the_time_limit_and_the_row_cap(store):
    with client(store, Limits(time_s=0.3, rows=250)) as c:
        refused(c.post("/api/sql", json={"sql": "SELECT count(*) FROM range(100000000000) a, range(10) b"},
                       headers=OWN), 400, "ran past the 0.3 s limit")
        res = c.post("/api/sql", json={"sql": "SELECT range AS i FROM range(1000) ORDER BY i", "page": 2}, headers=OWN)
        res = res.json()
        assert res["total"] == 250 and res["capped"] and [r["i"] for r in res["rows"]] == list(range(200, 250))


def test_a_result_past_the_byte_cap_is_one_line_400(store):
    big = "SELECT repeat('x', 10000) AS s FROM range(500)"  # ~5 MB of text, well under the row cap
    with client(store, Limits(result_bytes=1 << 20)) as c:
        refused(c.post("/api/sql", json={"sql": big}, headers=OWN), 400, "larger than the 1 MiB limit")
        refused(c.get("/api/export", params={"view": "sql", "q": big, "format": "csv", "key": KEY}), 400,
                "larger than the 1 MiB limit")
        small = c.post("/api/sql", json={"sql": "SELECT repeat('x', 10000) AS s FROM range(50)"}, headers=OWN)
        assert small.status_code == 200 and small.json()["total"] == 50
    with client(store) as c:  # the default cap (64 MiB) lets the 5 MB through
        assert c.post("/api/sql", json={"sql": big}, headers=OWN).json()["total"] == 500


HOST_PROBE = """
import json, resource, sys
from starlette.testclient import TestClient
from bonforge.storage.store import StageStore
from bonforge.viewer.app import create_app
from bonforge.viewer.sql import Limits
app = create_app(StageStore(sys.argv[1]), copies=False, key="k",
                 limits=Limits(result_bytes=1 << 20, memory_bytes=128 << 20))
own = {"X-Bonforge-Key": "k"}
with TestClient(app, base_url="http://127.0.0.1:8765") as c:
    small = c.post("/api/sql", json={"sql": "SELECT 1 AS one"}, headers=own).json()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    big = c.post("/api/sql", json={"sql": sys.argv[2]}, headers=own)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    after = c.post("/api/sql", json={"sql": "SELECT 2 AS two"}, headers=own).json()
print(json.dumps({"small": small["rows"], "status": big.status_code, "error": big.json().get("error"),
                  "grown_kib": grown, "workers_peak_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                  "after": after["rows"]}))
"""


@pytest.mark.parametrize("query", [
    "SELECT repeat('x', 1500000) AS s FROM range(1024)",  # one DuckDB vector of 1.5 GB
    "SELECT repeat('x', 1000000000) AS s",  # one value of 1 GB
])  # fmt: skip
def test_a_query_far_past_the_byte_cap_is_refused_with_the_host_memory_bounded(store, query):
    """DuckDB's memory limit does not bind the vectors a function fills: the 1 MiB cap was checked after such a
    vector (1.5 GB here; the review saw 5.1 GB): the viewer's own peak grew by 1.5 GB before the refusal. The
    SQL box's worker process has a memory bound of its own, and the viewer process holds the result only.
    Measured in a subprocess: its own peak grows by under 64 MB (0 here), its worker's peak stays under the
    bound (128 MiB + 2 MiB + the base; 434 MB here), and the viewer answers before and after."""
    out = subprocess.run([sys.executable, "-c", HOST_PROBE, str(store.root), query], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["small"] == [{"one": 1}] and got["after"] == [{"two": 2}]  # controls: answered before and after
    assert got["status"] == 400 and "\n" not in got["error"] and "Traceback" not in got["error"], got
    assert got["grown_kib"] < 64 << 10, got
    assert got["workers_peak_kib"] < memory_bound(Limits(result_bytes=1 << 20, memory_bytes=128 << 20)) >> 10, got


def test_a_worker_that_died_is_replaced_and_an_unreadable_run_is_one_line(store, tmp_path):
    with client(store) as c:
        assert c.post("/api/sql", json={"sql": "SELECT 1 AS a"}, headers=OWN).json()["rows"] == [{"a": 1}]
        (worker,) = c.app.state.sql._workers.values()
        worker._proc.kill()  # killed between two queries (the kernel's OOM killer, a user)
        worker._proc.wait()
        assert c.post("/api/sql", json={"sql": "SELECT 2 AS a"}, headers=OWN).json()["rows"] == [{"a": 2}]
    from bonforge.viewer.sql_worker import SqlWorker

    run_id = store.runs()[-1].run_id
    lost = SqlWorker(str(tmp_path / "no-store"), run_id, str(tmp_path), Limits())
    try:
        with pytest.raises(BadRequest, match=r"^the run's catalog did not open: no runs recorded in"):
            lost.query("SELECT 1", 10)
    finally:
        lost.stop()


def test_a_query_past_the_memory_limit_is_one_line_400(store):
    with client(store, Limits(memory_bytes=64 << 20)) as c:
        res = c.post("/api/sql", json={"sql": "SELECT current_setting('memory_limit') AS m"}, headers=OWN)
        assert res.json()["rows"] == [{"m": "64.0 MiB"}]
        hungry = ("SELECT length(string_agg(range::VARCHAR || repeat('y', 40), ',')) AS n FROM range(20000000)")
        refused(c.post("/api/sql", json={"sql": hungry}, headers=OWN), 400, "memory limit (64 MiB)", "Out of Memory")
        assert c.post("/api/sql", json={"sql": "SELECT 1 AS one"}, headers=OWN).json()["rows"] == [{"one": 1}]
    with client(store) as c:  # the default: 2 GiB, not DuckDB's 80 % of the machine's memory
        res = c.post("/api/sql", json={"sql": "SELECT current_setting('memory_limit') AS m"}, headers=OWN)
        assert res.json()["rows"] == [{"m": "2.0 GiB"}]


@pytest.mark.parametrize("args, words", [
    (["--memory-limit", "lots"], "--memory-limit must be a size such as 512MB or 2GB, not 'lots'"),
    (["--max-result", "0"], "--max-result must be a size such as 512MB or 2GB, not '0'"),
])
def test_bad_limits_are_one_error_line(store, args, words):
    res = CliRunner().invoke(cli, ["view", "--store", str(store.root), *args])
    assert res.exit_code == 2 and res.output.strip().splitlines() == [f"error: {words}"]


# -- the viewer's own page only ------------------------------------------------------------------------


def test_the_page_carries_its_key_and_its_own_requests_are_answered(store):
    with client(store) as c:
        page = c.get("/")
        assert page.status_code == 200 and f'<meta name="bonforge-key" content="{KEY}">' in page.text
        assert page.headers["cache-control"] == "no-store" and page.headers["x-frame-options"] == "DENY"
        same = {**OWN, "Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:8765"}
        assert c.get("/api/runs", headers=same).status_code == 200
        assert c.post("/api/sql", json={"sql": "SELECT 1 AS a"}, headers=same).json()["rows"] == [{"a": 1}]
        export = c.get("/api/export", params={"view": "problems", "format": "csv", "key": KEY},
                       headers={"Sec-Fetch-Site": "same-origin"})
        assert export.status_code == 200 and export.text.count("\n") == 7  # header + six problems
        typed = c.get("/api/runs", headers={**OWN, "Sec-Fetch-Site": "none"})  # a URL the user typed
        assert typed.status_code == 200
        assert c.get("/static/app.js").status_code == 200  # the page's own files need no key


@pytest.mark.parametrize("method, path, kw, words", [
    ("GET", "/api/runs", {}, ["lacks the viewer page's key"]),
    ("GET", "/api/runs", {"headers": {"X-Bonforge-Key": "guess"}}, ["lacks the viewer page's key"]),
    ("GET", "/api/runs", {"params": {"key": KEY}}, ["lacks the viewer page's key"]),  # ?key= is for exports only
    ("GET", "/api/export", {"params": {"view": "sql", "q": "SELECT 1"}}, ["lacks the viewer page's key"]),
    ("GET", "/api/export", {"params": {"view": "sql", "q": "SELECT 1", "key": KEY},
                            "headers": {"Sec-Fetch-Site": "cross-site"}}, ["cross-site request"]),
    ("GET", "/api/export", {"params": {"view": "sql", "q": "SELECT 1", "key": KEY},
                            "headers": {"Sec-Fetch-Site": "same-site"}}, ["same-site request"]),
    ("POST", "/api/sql", {"content": '{"sql": "SELECT 1"}', "headers": {**OWN, "Sec-Fetch-Site": "cross-site",
                                                                       "Content-Type": "text/plain"}},
     ["cross-site request"]),
    ("POST", "/api/sql", {"json": {"sql": "SELECT 1"}, "headers": {**OWN, "Origin": "http://127.0.0.1:9999"}},
     ["from http://127.0.0.1:9999"]),
    ("POST", "/api/sql", {"json": {"sql": "SELECT 1"}, "headers": {**OWN, "Origin": "null"}}, ["from null"]),
    ("GET", "/api/problems", {"headers": {**OWN, "Origin": "http://evil.example"}}, ["from http://evil.example"]),
])
def test_requests_that_are_not_the_pages_own_get_403(store, method, path, kw, words):
    with client(store) as c:
        refused(c.request(method, path, **kw), 403, *words)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_a_post_body_is_json_only(store, content_type):
    with client(store) as c:
        res = c.post("/api/sql", content='{"sql": "SELECT 1"}', headers={**OWN, "Content-Type": content_type})
        refused(res, 415, "must be JSON")


def test_the_host_check_against_dns_rebinding_holds(store):
    with client(store, base_url="http://attacker.example:8765") as c:
        assert c.get("/api/runs", headers=OWN).status_code == 400
        assert c.get("/").status_code == 400


def test_a_token_server_needs_the_token_and_the_key(store):
    with client(store, base_url="http://10.0.0.5:8765", token="s3cret") as c:
        refused(c.get("/api/runs", headers=OWN), 403, "token")
        assert c.get("/", params={"token": "s3cret"}).status_code == 200  # sets the cookie
        refused(c.get("/api/runs"), 403, "key")
        assert c.get("/api/runs", headers=OWN).status_code == 200
