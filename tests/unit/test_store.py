import pyarrow as pa
import pytest

from bonforge.config import MathVerifyConfig
from bonforge.errors import StoreError
from bonforge.runner import plan_shards, run_stage
from bonforge.storage.store import stage_key


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

    kw = dict(version="1", config={}, upstream={}, table=table, shard_rows=6)
    with pytest.raises(Boom):
        run_stage(store, "demo", "k", compute=lambda s: compute(s, fail_on="p004"), **kw)
    assert not store.exists("demo", "k")
    with pytest.raises(StoreError):
        store.read("demo", "k")
    assert store.done_shards("demo", "k") == {0, 1}
    # no temp file left behind beside the shards
    assert sorted(p.name for p in store.stage_dir("demo", "k").iterdir()) == [
        "part-00000.parquet",
        "part-00001.parquet",
    ]
    calls.clear()
    man = run_stage(store, "demo", "k", compute=compute, **kw)
    assert calls == ["p004", "p006", "p008"]  # only the missing shards
    assert man["rows"] == 30 and man["shards_resumed"] == 2
    assert store.read("demo", "k").sort_by("x").column("x").to_pylist() == list(range(30))
    calls.clear()
    assert run_stage(store, "demo", "k", compute=compute, **kw)["cached"] is True
    assert calls == []


def test_commit_compacts_small_shards_into_files_readers_read(store):
    """With compact_rows, readers get a few files of about that many rows, in shard order; the part files
    stay as the record of done shards."""
    table = pa.table({"problem_id": [f"p{i:03d}" for i in range(50)], "x": list(range(50))})
    man = run_stage(store, "demo", "k", version="1", config={}, upstream={}, table=table, compute=lambda s: s,
                    shard_rows=4, compact_rows=20)  # fmt: skip
    assert man["files"] == ["data-00000.parquet", "data-00001.parquet", "data-00002.parquet"]
    assert man["rows_per_file"] == [20, 20, 10] and man["rows"] == 50
    assert store.read("demo", "k").column("x").to_pylist() == list(range(50))
    assert store.done_shards("demo", "k") == set(range(13))
