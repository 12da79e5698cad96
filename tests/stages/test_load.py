"""Code problems from local Hugging Face dataset directories load like Parquet: save_to_disk output (one
split or several) and hub-style Parquet shards, by split or by glob."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bonforge.config import ProblemsConfig
from bonforge.errors import DataError
from bonforge.stages.load import load_problems

ROWS = [{"name": f"p{i}", "description": f"Print {i}.", "public_tests": {"input": [""], "output": [f"{i}\n"]},
         "private_tests": {"input": [], "output": []}} for i in range(6)]  # fmt: skip
FIELDS = {"question": "description", "id": "name", "tests": ["public_tests", "private_tests"]}


def cfg(path, **kw) -> ProblemsConfig:
    return ProblemsConfig(source={"path": str(path)}, name="cc", domain="code", format="hf", fields=FIELDS, **kw)


@pytest.fixture(scope="module")
def expected(tmp_path_factory) -> pa.Table:
    path = tmp_path_factory.mktemp("jsonl") / "cc.jsonl"
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return load_problems(cfg(path).model_copy(update={"format": "jsonl"}), path)


def test_save_to_disk_directories(tmp_path, expected):
    datasets = pytest.importorskip("datasets")
    one = datasets.Dataset.from_list(ROWS)
    one.save_to_disk(str(tmp_path / "one"))
    assert load_problems(cfg(tmp_path / "one"), tmp_path / "one").equals(expected)
    both = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:4]),
                                 "test": datasets.Dataset.from_list(ROWS[4:])})
    both.save_to_disk(str(tmp_path / "both"))
    assert load_problems(cfg(tmp_path / "both"), tmp_path / "both").equals(expected.slice(0, 4))  # train by default
    test = load_problems(cfg(tmp_path / "both", split="test"), tmp_path / "both")
    assert test.column("question").to_pylist() == ["Print 4.", "Print 5."]
    with pytest.raises(DataError, match=r"no split 'dev' \(splits: train, test\); set problems.split"):
        load_problems(cfg(tmp_path / "both", split="dev"), tmp_path / "both")


def test_hub_style_parquet_shards(tmp_path, expected):
    (tmp_path / "data").mkdir()
    for name, part in (("train-00000-of-00002", ROWS[:3]), ("train-00001-of-00002-e991a271dbfa9925", ROWS[3:])):
        pq.write_table(pa.Table.from_pylist(part), tmp_path / "data" / f"{name}.parquet")  # as the hub names them
    pq.write_table(pa.Table.from_pylist(ROWS[:1]), tmp_path / "data" / "test-00000-of-00001.parquet")
    assert load_problems(cfg(tmp_path), tmp_path).equals(expected)
    globbed = load_problems(cfg(tmp_path, files="data/train-00001-*.parquet"), tmp_path)
    assert globbed.column("question").to_pylist() == ["Print 3.", "Print 4.", "Print 5."]
    with pytest.raises(DataError, match="no file matches 'data/dev-\\*'"):
        load_problems(cfg(tmp_path, files="data/dev-*"), tmp_path)
