"""The store on a real S3 server (SeaweedFS): commit, crash and resume, an upload killed half-way, dataset
version races, SQL, Prefect's results, the report's figure cache; the same contracts as a local store,
without rename."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.errors import StoreError
from bonforge.engine import run_node
from bonforge.stage import Node, Stage
from bonforge.storage.datasets import publish
from bonforge.storage.run_record import RunRecord
from bonforge.storage.store import StageStore


@pytest.fixture
def s3_store(seaweedfs, s3_env) -> StageStore:
    return StageStore(seaweedfs.url())


def demo(table: pa.Table, compute, name: str = "demo", **stage_fields) -> Node:
    """A stage computing ``table`` shard by shard."""
    return Stage(name, "1", compute=compute, table=lambda i: table, **stage_fields).bind({}, {})


def _table(n_problems: int, per: int = 3) -> pa.Table:
    pids = [f"p{i:03d}" for i in range(n_problems) for _ in range(per)]
    return pa.table({"problem_id": pids, "x": list(range(len(pids)))})


class Boom(RuntimeError):
    pass


def test_crash_mid_stage_then_rerun_computes_only_the_missing_shards(s3_store):
    calls = []

    def compute(shard, fail_on=None):
        first = shard.column("problem_id")[0].as_py()
        calls.append(first)
        if first == fail_on:
            raise Boom(first)
        return shard

    table = _table(10)
    with pytest.raises(Boom):
        run_node(s3_store, demo(table, lambda s: compute(s, fail_on="p004"), shard_rows=6))
    k = demo(table, compute).key
    assert not s3_store.exists("demo", k)
    with pytest.raises(StoreError, match="not committed"):
        s3_store.read("demo", k)
    names = sorted(s3_store.loc.names(s3_store.stage_dir("demo", k)))
    assert names == ["part-00000.parquet", "part-00001.parquet", "plan.json"]
    calls.clear()
    man = run_node(StageStore(s3_store.root), demo(table, compute, shard_rows=6))  # a fresh process's view
    assert calls == ["p004", "p006", "p008"] and man["shards_resumed"] == 2 and man["rows"] == 30
    assert s3_store.read("demo", k).sort_by("x").column("x").to_pylist() == list(range(30))
    calls.clear()
    assert run_node(s3_store, demo(table, compute, shard_rows=6))["cached"] is True and calls == []


def _fail_at_p004(shard: pa.Table) -> pa.Table:
    if shard.column("problem_id")[0].as_py() == "p004":
        raise Boom("p004")
    return shard


def test_commit_compacts_and_a_new_shard_plan_discards_stale_parts(s3_store):
    table = _table(10)
    with pytest.raises(Boom):
        run_node(s3_store, demo(table, _fail_at_p004, shard_rows=6))
    k = demo(table, _fail_at_p004).key
    assert s3_store.done_shards("demo", k) == {0, 1}
    man = run_node(s3_store, demo(table, lambda s: s, shard_rows=3, compact_rows=12))
    assert man["shards_resumed"] == 0 and man["rows_per_file"] == [12, 12, 6]
    assert man["files"] == ["data-00000.parquet", "data-00001.parquet", "data-00002.parquet"]
    assert s3_store.read("demo", k).column("x").to_pylist() == list(range(30))


_WRITER = """
import os, sys
import numpy as np, pyarrow as pa
from bonforge.storage.store import StageStore
blob = pa.array([np.random.default_rng(0).bytes(1 << 20) for _ in range(160)], pa.binary())
print("writing", flush=True)
StageStore(sys.argv[1]).write_shard("big", "k", 0, pa.table({"problem_id": ["p"] * 160, "blob": blob}))
print("written", flush=True)
"""


def test_an_upload_killed_half_way_leaves_no_object(s3_store, s3_env):
    """No rename is needed: S3 shows an object only once its upload completes."""
    import boto3

    client = boto3.client("s3")
    bucket, prefix = s3_store.loc.key(s3_store.root).split("/", 1)
    argv = [sys.executable, "-c", _WRITER, s3_store.root]
    proc = subprocess.Popen(argv, env=s3_env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        deadline = time.monotonic() + 60
        while not client.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads"):
            assert proc.poll() is None and time.monotonic() < deadline, "the upload ended before it was seen"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.stdout.read() == ""  # it never finished
    assert s3_store.done_shards("big", "k") == set()
    assert not s3_store.loc.is_file(s3_store.shard_path("big", "k", 0))


_RACER = """
import json, sys
import pyarrow as pa
from bonforge.storage.datasets import publish
from bonforge.storage.fs import open_location

url, what, i = sys.argv[1], sys.argv[2], int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()  # the start signal, sent to every racer at once
if what == "claim":
    loc = open_location(url)
    print(json.dumps(loc.create(loc.path("claims/once"), b"mine")))
else:
    man = publish(url, "raced", {"plain": pa.table({"i": [i] * (i + 1)})}, {"writer": i})
    print(json.dumps([i, man["version"], man["content_sha256"]]))
"""


def _race(what: str, url: str, env: dict, n: int = 6) -> list:
    """``n`` separate interpreters (as concurrent builds are) released together once all are ready."""
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, url, what, str(i)], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(n)]  # fmt: skip
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()[-3000:]
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


def test_a_conditional_create_has_exactly_one_winner(s3_store, s3_env):
    assert sorted(_race("claim", s3_store.root, s3_env, n=8)) == [False] * 7 + [True]
    assert s3_store.loc.read_bytes(s3_store.loc.path("claims/once")) == b"mine"


def test_builds_racing_for_a_version_never_both_get_it(s3_store, s3_env):
    results = _race("publish", s3_store.root, s3_env)
    assert sorted(v for _, v, _ in results) == [1, 2, 3, 4, 5, 6]
    loc = s3_store.loc
    for i, version, content in results:
        man = json.loads(loc.read_bytes(loc.path("datasets", "raced", f"v{version}", "manifest.json")))
        assert (man["writer"], man["content_sha256"]) == (i, content)
        data = s3_store.read_file(loc.path("datasets", "raced", f"v{version}", "plain", "train.parquet"))
        assert data.column("i").to_pylist() == [i] * (i + 1)


def test_a_claimed_version_without_manifest_is_invisible_and_skipped(s3_store):
    loc = s3_store.loc
    assert loc.create(loc.path("datasets", "ds", ".claims", "v1"), b"{}")  # a writer that died after its claim
    assert not loc.is_file(loc.path("datasets", "ds", "v1", "manifest.json"))
    man = publish(s3_store.root, "ds", {"plain": _table(2)}, {})
    assert man["version"] == 2 and loc.is_file(loc.path("datasets", "ds", "v2", "manifest.json"))
    assert publish(s3_store.root, "ds", {"plain": _table(2)}, {})["reused"] is True


def test_a_version_on_s3_has_its_card_splits_latest_and_listing(s3_store, s3_env):
    from bonforge.storage.datasets import latest, listing
    from bonforge.storage.splits import Split

    loc = s3_store.loc
    publish(s3_store.root, "ds", {"plain": _table(2)}, {"recipe": "r"})
    man = publish(s3_store.root, "ds", {"plain": _table(40)}, {"recipe": "r"}, validation=Split(0.5, 0))
    assert set(man["files"]) == {"plain/train.parquet", "plain/validation.parquet"}
    assert loc.read_bytes(loc.path("datasets", "ds", "v2", "README.md")).startswith(b"---\nlicense: unknown\n")
    assert latest(s3_store.root, "ds") == 2 and loc.read_bytes(loc.path("datasets", "ds", "latest")) == b"v2\n"
    assert [(r["version"], r["latest"]) for r in listing(s3_store.root)] == [(2, True), (1, False)]
    out = CliRunner(env=s3_env).invoke(app, ["datasets", "--store", s3_store.root])
    assert out.exit_code == 0 and out.output.splitlines()[1].split()[:3] == ["ds", "v2", "latest"], out.output
    publish(s3_store.root, "ds", {"plain": _table(2)}, {"recipe": "r"})  # v1's content: reused, and latest
    assert latest(s3_store.root, "ds") == 1


def test_sql_and_runs_over_an_s3_store(s3_store, s3_env):
    key = run_node(s3_store, demo(_table(4), lambda s: s, name="problem_stats", shard_rows=3))["key"]
    s3_store.record_run(RunRecord.from_json({"run_id": "r1", "started": "2026", "status": "succeeded",
                                             "stages": {"problem_stats": [key]}}))
    query = "SELECT count(*) AS n, sum(x)::INT AS s FROM problem_stats"
    res = CliRunner().invoke(app, ["sql", query, "--store", s3_store.root, "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == {"n": 12, "s": 66}
    res = CliRunner().invoke(app, ["sql", "SELECT run_id, status FROM runs", "--store", s3_store.root,
                                   "--format", "csv"])  # fmt: skip
    assert res.output.splitlines() == ['"run_id","status"', '"r1","succeeded"']


def test_the_report_figure_cache_on_s3(s3_store):
    from bonforge.report import _drawing_code, _figure
    from bonforge.report.plots import Plot

    drawn = []
    plot = Plot("demo", "Demo", "SELECT 1", [(1, 2), (3, 4)], lambda ax, rows: drawn.append(ax.plot(*zip(*rows))))
    first = _figure(s3_store, plot, _drawing_code())
    assert first.startswith(b"\x89PNG") and len(drawn) == 1
    assert _figure(s3_store, plot, _drawing_code()) == first and len(drawn) == 1  # read back from the bucket
    assert s3_store.loc.names(s3_store.loc.path("reports", "figures"))[0].endswith(".png")
