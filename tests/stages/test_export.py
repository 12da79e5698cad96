"""Dataset versions: immutable, content-addressed, with lineage and checksums; verl format."""

import json

import pyarrow as pa
import pyarrow.parquet as pq

from bonforge.schema import GENSELECT
from bonforge.storage.datasets import latest, publish
from bonforge.storage.store import sha256_file
from bonforge.tasks.export import VERL_SCHEMA, formats


def genselect(n: int) -> pa.Table:
    return pa.Table.from_pylist([{
        "prompt_id": f"p{i}#0", "problem_id": f"p{i}", "prompt_index": 0, "candidate_ids": ["a", "b", "c"],
        "n_candidates": 3, "correct_indices": [1], "prompt": f"prompt {i}", "n_tokens": 5, "token_counter": "estimate",
    } for i in range(n)], schema=GENSELECT)


def test_verl_rows():
    t = formats(genselect(2), ["verl", "plain"], "bonforge/x")
    assert t["verl"].schema == VERL_SCHEMA and t["plain"].num_rows == 2
    row = t["verl"].to_pylist()[1]
    assert row["prompt"] == [{"role": "user", "content": "prompt 1"}]
    assert row["reward_model"] == {"style": "rule", "ground_truth": "[1]"}
    assert row["extra_info"]["problem_id"] == "p1" and row["ability"] == "genselect"


def test_identical_content_reuses_the_version_and_new_content_gets_the_next(tmp_path):
    lineage = {"stages": {"genselect": ["k1"]}}
    v1 = publish(tmp_path, "ds", formats(genselect(3), ["verl", "plain"], "x"), lineage)
    again = publish(tmp_path, "ds", formats(genselect(3), ["verl", "plain"], "x"), {"stages": {"genselect": ["k9"]}})
    v2 = publish(tmp_path, "ds", formats(genselect(4), ["verl", "plain"], "x"), lineage)
    assert (v1["version"], again["version"], v2["version"]) == (1, 1, 2)
    assert v1["reused"] is False and again["reused"] is True
    assert latest(tmp_path, "ds").name == "v2"
    man = json.loads((tmp_path / "datasets" / "ds" / "v1" / "manifest.json").read_text())
    assert man["stages"] == {"genselect": ["k1"]}  # v1's lineage is untouched by the reuse
    for name, meta in man["files"].items():
        path = tmp_path / "datasets" / "ds" / "v1" / name
        assert sha256_file(path) == meta["sha256"] and pq.read_metadata(path).num_rows == meta["rows"]
    # nothing half-written is left beside the versions
    assert sorted(p.name for p in (tmp_path / "datasets" / "ds").iterdir()) == ["v1", "v2"]


def test_stream_of_shards_equals_one_table(tmp_path):
    """Export streams genselect shard by shard: the same rows and indices as one whole table (one row
    group per shard, so the bytes differ)."""
    from bonforge.tasks.export import stream

    whole = genselect(7)
    shards = [whole.slice(0, 3), whole.slice(3, 0), whole.slice(3)]
    one = publish(tmp_path / "a", "ds", formats(whole, ["verl", "plain"], "x"), {})
    many = publish(tmp_path / "b", "ds", stream(shards, ["verl", "plain"], "x"), {})
    assert one["files"]["verl/train.parquet"]["rows"] == many["files"]["verl/train.parquet"]["rows"] == 7
    for fmt in ("verl", "plain"):
        a, b = (pq.read_table(tmp_path / d / "datasets" / "ds" / "v1" / fmt / "train.parquet") for d in "ab")
        assert a.equals(b)
    verl = pq.read_table(tmp_path / "b" / "datasets" / "ds" / "v1" / "verl" / "train.parquet")
    assert [r["index"] for r in verl.column("extra_info").to_pylist()] == list(range(7))


def test_ground_truth_is_the_json_list_of_correct_indices():
    t = genselect(1).set_column(5, "correct_indices", pa.array([[0, 2, 11]], pa.list_(pa.int32())))
    assert json.loads(formats(t, ["verl"], "x")["verl"]["reward_model"][0]["ground_truth"].as_py()) == [0, 2, 11]


def test_stream_refuses_shards_out_of_problem_order():
    import pytest

    from bonforge.tasks.export import stream

    whole = genselect(4)
    with pytest.raises(ValueError, match="out of problem order"):
        list(stream([whole.slice(2), whole.slice(0, 2)], ["plain"], "x"))
