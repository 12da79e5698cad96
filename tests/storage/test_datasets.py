"""Dataset versions beyond their files: the validation split, the card, ``latest`` and the listing."""

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bonforge.schema import GENSELECT
from bonforge.storage.datasets import latest, listing, publish
from bonforge.storage.export import formats
from bonforge.storage.splits import Split


def genselect(problems: int, per_problem: int = 2) -> pa.Table:
    rows = [{"prompt_id": f"p{p:03d}#{i}", "problem_id": f"p{p:03d}", "prompt_index": i, "candidate_ids": ["a", "b"],
             "n_candidates": 2, "correct_indices": [1], "prompt": f"prompt {p} {i}", "n_tokens": 3,
             "token_counter": "estimate"} for p in range(problems) for i in range(per_problem)]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=GENSELECT)


def _problems(path: Path, fmt: str) -> set[str]:
    t = pq.read_table(path)
    if fmt == "plain":
        return set(t.column("problem_id").to_pylist())
    return {r["problem_id"] for r in t.column("extra_info").to_pylist()}


def test_the_validation_split_is_by_problem_seeded_and_stable(tmp_path):
    man = publish(tmp_path, "ds", formats(genselect(200), ["verl", "plain"], "x"), {}, validation=Split(0.25, 7))
    folder = Path(man["path"])
    assert set(man["files"]) == {f"{f}/{s}.parquet" for f in ("verl", "plain") for s in ("train", "validation")}
    for fmt in ("verl", "plain"):
        train, val = (_problems(folder / fmt / f"{s}.parquet", fmt) for s in ("train", "validation"))
        assert not train & val and len(train | val) == 200  # every problem in one split only
        assert 30 <= len(val) <= 70  # about a quarter
        assert man["files"][f"{fmt}/validation.parquet"]["rows"] == 2 * len(val)  # all of a problem's rows
    again = publish(tmp_path, "ds", formats(genselect(200), ["verl", "plain"], "x"), {}, validation=Split(0.25, 7))
    assert again["version"] == 1 and again["reused"]  # deterministic: the same content
    other = publish(tmp_path, "ds", formats(genselect(200), ["verl", "plain"], "x"), {}, validation=Split(0.25, 8))
    assert other["version"] == 2  # another seed, other problems
    grown = publish(tmp_path, "ds", formats(genselect(300), ["plain"], "x"), {}, validation=Split(0.25, 7))
    before = _problems(folder / "plain" / "validation.parquet", "plain")
    after = _problems(Path(grown["path"]) / "plain" / "validation.parquet", "plain")
    assert after & {f"p{p:03d}" for p in range(200)} == before  # added problems move none of the others


def test_a_table_of_many_chunks_splits_as_one():
    whole = genselect(50)
    chunked = pa.concat_tables([whole.slice(0, 30), whole.slice(30)])
    assert chunked.column("problem_id").num_chunks == 2
    split = Split(0.4, 3)
    assert split.mask(chunked).to_pylist() == split.mask(whole).to_pylist()
    assert split.mask(whole.slice(0, 0)).to_pylist() == []


def test_a_table_without_problem_ids_cannot_be_split():
    with pytest.raises(ValueError, match="without problem ids"):
        Split(0.5, 0).mask(pa.table({"x": [1]}))


def test_latest_names_what_the_last_build_published_or_reused(tmp_path):
    assert latest(tmp_path, "ds") is None
    publish(tmp_path, "ds", formats(genselect(2), ["plain"], "x"), {})
    publish(tmp_path, "ds", formats(genselect(3), ["plain"], "x"), {})
    link = tmp_path / "datasets" / "ds" / "latest"
    assert latest(tmp_path, "ds") == 2 and os.readlink(link) == "v2"
    assert (link / "plain" / "train.parquet").is_file()  # a path a training job can be given
    publish(tmp_path, "ds", formats(genselect(2), ["plain"], "x"), {})  # v1's content again: reused
    assert latest(tmp_path, "ds") == 1
    assert sorted(p.name for p in link.parent.iterdir()) == ["latest", "v1", "v2"]  # no pointer left half-made


def test_listing_every_version_newest_first(tmp_path):
    publish(tmp_path, "b", formats(genselect(2), ["verl", "plain"], "x"), {"recipe": "r-b"},
            trainers={"verl": {"train_file": "verl/train.parquet"}})
    publish(tmp_path, "a", formats(genselect(2), ["plain"], "x"), {"recipe": "r-a"})
    publish(tmp_path, "a", formats(genselect(5), ["plain"], "x"), {"recipe": "r-a"}, validation=Split(0.5, 0))
    rows = listing(tmp_path)
    assert [(r["name"], r["version"], r["latest"], r["recipe"]) for r in rows] == [
        ("a", 2, True, "r-a"), ("a", 1, False, "r-a"), ("b", 1, True, "r-b")]
    assert rows[1]["rows"] == {"train": 4}
    assert sum(rows[0]["rows"].values()) == 10 and set(rows[0]["rows"]) == {"train", "validation"}
    only = listing(tmp_path, "b")
    assert len(only) == 1 and (only[0]["config"], only[0]["rows"]) == ("verl", {"train": 4})  # the trainer's first
    assert json.loads((Path(rows[0]["path"]) / "manifest.json").read_text())["version"] == 2


@pytest.mark.parametrize("name", [".", "..", "../outside", "a/b", "x" * 300, ".claims", "-x", "x\0"])
def test_a_name_that_is_not_a_folder_of_its_own_is_refused_before_anything_is_written(tmp_path, name):
    from bonforge.errors import ConfigError

    store = tmp_path / "store"
    with pytest.raises(ConfigError, match="a dataset name must be 1 to 100 letters"):
        publish(store, name, formats(genselect(2), ["plain"], "x"), {})
    with pytest.raises(ConfigError, match="a dataset name must be 1 to 100 letters"):
        listing(store, name)
    assert sorted(p.name for p in tmp_path.rglob("*")) == []  # nothing written, inside the store or beside it
    assert publish(store, "ok.v2", formats(genselect(2), ["plain"], "x"), {})["version"] == 1  # control


def test_a_name_that_differs_from_a_published_one_only_in_case_is_refused(tmp_path):
    from bonforge.errors import StoreError

    publish(tmp_path, "GSM8K", formats(genselect(2), ["plain"], "x"), {})
    with pytest.raises(StoreError, match="dataset 'gsm8k': the store holds 'GSM8K', the same folder on a filesystem"):
        publish(tmp_path, "gsm8k", formats(genselect(3), ["plain"], "x"), {})
    assert [r["name"] for r in listing(tmp_path)] == ["GSM8K"]
    assert publish(tmp_path, "GSM8K", formats(genselect(3), ["plain"], "x"), {})["version"] == 2  # its own name
