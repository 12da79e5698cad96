import os

import pyarrow as pa
import pytest

from bonforge.config import MathVerifyConfig
from bonforge.errors import StoreError
from bonforge.engine import run_node
from bonforge.engine.shards import plan_shards
from bonforge.keys import stage_key
from bonforge.stage import Node, Ref, Stage


def test_stage_key_is_stable_and_order_independent():
    a = stage_key("s", "1", {"x": 1, "y": [1, 2]}, {"up": "k1"})
    b = stage_key("s", "1", {"y": [1, 2], "x": 1}, {"up": "k1"})
    assert a == b
    assert a != stage_key("s", "2", {"x": 1, "y": [1, 2]}, {"up": "k1"})  # code version
    assert a != stage_key("s", "1", {"x": 2, "y": [1, 2]}, {"up": "k1"})  # config
    assert a != stage_key("s", "1", {"x": 1, "y": [1, 2]}, {"up": "k2"})  # upstream
    assert a != stage_key("t", "1", {"x": 1, "y": [1, 2]}, {"up": "k1"})  # stage name


def test_execution_only_settings_stay_out_of_the_key():
    base = MathVerifyConfig()
    assert base.key_config() == MathVerifyConfig(timeout_s=60, workers=7).key_config()
    assert base.key_config() != MathVerifyConfig(last_number=False).key_config()


def test_a_node_key_is_its_stage_config_and_upstream_keys():
    """One ref is its key, a list its keys sorted and comma-joined; an absent upstream is left out."""
    stage = Stage("s", "3", compute=lambda t: t)
    node = stage.bind({"x": 1}, {"a": Ref("a", "k1"), "b": [Ref("b", "k3"), Ref("b", "k2")], "c": None})
    assert node.upstream_keys == {"a": "k1", "b": "k2,k3"}
    assert node.key == stage_key("s", "3", {"x": 1}, {"a": "k1", "b": "k2,k3"})
    assert stage.bind({"x": 1}, {"a": Ref("a", "k1")}, shard_rows=5).key == stage_key("s", "3", {"x": 1}, {"a": "k1"})
    with pytest.raises(TypeError, match="exactly one of compute and open"):
        Stage("s", "1")


def test_the_manifest_records_the_identity_the_key_was_derived_from(store):
    store.write_shard("up", "u1", 0, pa.table({"problem_id": ["p1"]}))
    up = store.commit("up", "u1", 1, version="1", config={}, upstream={})
    node = Stage("s", "3", compute=lambda t, up_rows: t.append_column("n", pa.array([up_rows])),
                 table=lambda i: i.read("up"), context=lambda i: {"up_rows": i.read("up").num_rows},
                 summary=lambda w: {"n_total": w.read(["n"]).num_rows}).bind(
        {"x": 1}, {"up": [Ref("up", "u1", up)]}, note={"teacher": "t"})
    man = run_node(store, node)
    assert (man["stage"], man["key"], man["version"], man["config"], man["upstream"]) == (
        "s", node.key, "3", {"x": 1}, {"up": "u1"})
    assert man["teacher"] == "t" and man["n_total"] == 1 and man["cached"] is False
    assert store.read("s", node.key).column("n").to_pylist() == [1]


def demo(table: pa.Table, compute, **stage_fields) -> Node:
    """A stage computing ``table`` shard by shard."""
    return Stage("demo", "1", compute=compute, table=lambda i: table, **stage_fields).bind({}, {})


def _table(n_problems: int, per: int = 3) -> pa.Table:
    pids = [f"p{i:03d}" for i in range(n_problems) for _ in range(per)]
    cids = [f"{p}/t/{j}" for i, p in enumerate(pids) for j in [i % per]]
    return pa.table({"problem_id": pids, "candidate_id": cids, "x": list(range(len(pids)))})


def test_shards_never_split_a_problem():
    shards = plan_shards(_table(10), shard_rows=4)
    assert sum(s.num_rows for s in shards) == 30
    seen = set()
    for s in shards:
        pids = set(s.column("problem_id").to_pylist())
        assert not pids & seen
        seen |= pids


class Boom(RuntimeError):
    pass


def test_crash_mid_stage_leaves_nothing_visible_and_rerun_finishes_only_missing_shards(store):
    table = _table(10)
    calls = []

    def compute(shard, fail_on=None):
        first = shard.column("problem_id")[0].as_py()
        calls.append(first)
        if first == fail_on:
            raise Boom(first)
        return shard

    with pytest.raises(Boom):
        run_node(store, demo(table, lambda s: compute(s, fail_on="p004"), shard_rows=6))
    k = demo(table, compute).key
    assert not store.exists("demo", k)
    with pytest.raises(StoreError):
        store.read("demo", k)
    assert store.done_shards("demo", k) == {0, 1}
    # no temp file left behind beside the shards
    assert sorted(p.name for p in store.stage_dir("demo", k).iterdir()) == [
        "part-00000.parquet",
        "part-00001.parquet",
        "plan.json",
    ]
    calls.clear()
    man = run_node(store, demo(table, compute, shard_rows=6))
    assert calls == ["p004", "p006", "p008"]  # only the missing shards
    assert man["rows"] == 30 and man["shards_resumed"] == 2
    assert store.read("demo", k).sort_by("x").column("x").to_pylist() == list(range(30))
    calls.clear()
    assert run_node(store, demo(table, compute, shard_rows=6))["cached"] is True
    assert calls == []


def test_a_rerun_with_another_shard_plan_discards_the_partial_shards(store):
    """Shards written under one plan are not mixed with another's (e.g. shard sizes changed between a
    crash and its rerun): they are recomputed."""
    table = _table(10)

    def fail_at_p004(shard):
        if shard.column("problem_id")[0].as_py() == "p004":
            raise Boom("p004")
        return shard

    with pytest.raises(Boom):
        run_node(store, demo(table, fail_at_p004, shard_rows=6))
    k = demo(table, fail_at_p004).key
    assert store.done_shards("demo", k) == {0, 1}  # p000-p001, p002-p003 (3 rows per problem)
    calls = []
    man = run_node(store, demo(table, lambda s: calls.append(s.num_rows) or s, shard_rows=9))
    assert man["shards_resumed"] == 0 and sum(calls) == 30
    assert store.read("demo", k).column("problem_id").to_pylist() == table.column("problem_id").to_pylist()


def test_temp_files_of_dead_writers_on_this_host_are_removed(store):
    import socket
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    node = demo(_table(2), lambda s: s)
    d = store.stage_dir("demo", node.key)
    d.mkdir(parents=True)
    host = socket.gethostname()
    dead_tmp = d / f".part-00000.parquet.tmp-{host}-{dead.stdout.strip()}"
    live_tmp = d / f".part-00001.parquet.tmp-{host}-{os.getpid()}"
    other_host = d / f".part-00002.parquet.tmp-elsewhere-{dead.stdout.strip()}"
    for p in (dead_tmp, live_tmp, other_host):
        p.write_bytes(b"partial")
    run_node(store, node)
    assert not dead_tmp.exists() and live_tmp.exists() and other_host.exists()


def test_commit_compacts_small_shards_into_files_readers_read(store):
    """With compact_rows, readers get a few files of about that many rows, in shard order; the part files
    stay as the record of done shards."""
    table = pa.table({"problem_id": [f"p{i:03d}" for i in range(50)], "x": list(range(50))})
    node = demo(table, lambda s: s, shard_rows=4, compact_rows=20)
    k = node.key
    man = run_node(store, node)
    assert man["files"] == ["data-00000.parquet", "data-00001.parquet", "data-00002.parquet"]
    assert man["rows_per_file"] == [20, 20, 10] and man["rows"] == 50
    assert store.read("demo", k).column("x").to_pylist() == list(range(50))
    assert store.done_shards("demo", k) == set(range(13))


@pytest.mark.parametrize("spec", ["gs://bucket/prefix", "s3:/bucket/prefix", "https://host/store"])
def test_a_store_url_that_is_not_supported_is_one_error_line_never_a_local_folder(spec, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from bonforge.cli import app

    monkeypatch.chdir(tmp_path)
    for args in (["sql", "SELECT 1", "--store", spec], ["runs"]):
        res = CliRunner(env={"BONFORGE_STORE": spec}).invoke(app, args)
        assert res.exit_code == 2
        assert res.output.splitlines() == [
            f"error: store {spec!r}: the scheme {spec.split(':')[0]!r} is not supported; use a local folder or "
            "s3://bucket/prefix"
        ]
    assert list(tmp_path.iterdir()) == []


def test_a_file_url_is_a_local_store(tmp_path):
    from bonforge.storage.store import StageStore

    assert StageStore(f"file://{tmp_path}/s").root == tmp_path / "s"
