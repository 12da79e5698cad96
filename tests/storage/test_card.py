"""The dataset card: ``datasets`` loads a version folder by it, reads its features back as the files' own, and
finds the lineage in its header."""

from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from bonforge.schema import GENSELECT
from bonforge.storage import card
from bonforge.storage.datasets import publish
from bonforge.storage.export import RL_CANDIDATES_SCHEMA, RL_SCHEMA, VERL_SCHEMA, formats, trainers
from bonforge.storage.splits import Split

LINEAGE = {"recipe": "r", "overrides": ["filter.max_pass_rate=0.75"], "bonforge_version": "0.1.0",
           "stages": {"problem_stats": ["k1"], "genselect": ["k2"]},
           "sources": [{"role": "problems", "path": "gsm8k/test.jsonl", "url": None, "content": {"sha256": "ab" * 32}}],
           "summary": {"problems": 9, "kept": 3, "dropped": {"too_easy": 5, "too_hard": 1}, "candidates": 36},
           "license": "mit"}  # fmt: skip


def genselect(problems: int) -> pa.Table:
    rows = [{"prompt_id": f"p{p}#0", "problem_id": f"p{p}", "prompt_index": 0, "candidate_ids": ["a", "b"],
             "n_candidates": 2, "correct_indices": [1], "prompt": f"prompt {p} $2", "n_tokens": 3,
             "token_counter": "estimate"} for p in range(problems)]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=GENSELECT)


def _header(folder: Path) -> dict:
    text = (folder / "README.md").read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


@pytest.mark.parametrize("schema", [VERL_SCHEMA, GENSELECT, RL_SCHEMA, RL_CANDIDATES_SCHEMA,
                                    pa.schema([("nested", pa.list_(pa.list_(pa.float64()))), ("b", pa.bool_())])])
def test_features_read_back_as_the_files_own(schema):
    import datasets

    assert datasets.Features._from_yaml_list(card.features(schema)) == datasets.Features.from_arrow_schema(schema)


def test_a_map_column_is_left_to_datasets_to_read():
    with pytest.raises(ValueError, match="no card feature"):
        card.features(pa.schema([("m", pa.map_(pa.int32(), pa.float64()))]))


def test_load_dataset_reads_a_version_folder_by_its_card(tmp_path):
    import datasets

    man = publish(tmp_path, "ds", formats(genselect(40), ["verl", "plain"], "x"), LINEAGE,
                  trainers=trainers("genselect", "verl/train.parquet"), validation=Split(0.3, 1))
    folder = Path(man["path"])
    head = _header(folder)
    assert head["license"] == "mit" and head["configs"][0] == {
        "config_name": "verl", "default": True, "description": f"ds v1, content sha256 {man['content_sha256']}",
        "data_files": [{"split": "train", "path": "verl/train.parquet"},
                       {"split": "validation", "path": "verl/validation.parquet"}]}  # fmt: skip
    assert head["bonforge"]["overrides"] == ["filter.max_pass_rate=0.75"]
    assert head["bonforge"]["summary"]["dropped"] == {"too_easy": 5, "too_hard": 1}
    assert head["bonforge"]["sources"][0]["content"] == {"sha256": "ab" * 32}
    ds = datasets.load_dataset(str(folder))  # the default config, by the card
    rows = {s: man["files"][f"verl/{s}.parquet"]["rows"] for s in ("train", "validation")}
    assert {s: ds[s].num_rows for s in ds} == rows and sum(rows.values()) == 40
    assert ds["train"].features == datasets.Features.from_arrow_schema(VERL_SCHEMA)
    plain = datasets.load_dataset(str(folder), "plain", split="validation")
    assert plain.num_rows == rows["validation"] and plain[0]["prompt"].endswith(" $2")  # text as stored
    body = (folder / "README.md").read_text()
    assert "`--set filter.max_pass_rate=0.75`" in body and "9 in, 3 kept; dropped: 5 too easy, 1 too hard." in body


def test_a_card_without_a_validation_split_or_trainer(tmp_path):
    import datasets

    man = publish(tmp_path, "ds", formats(genselect(3), ["plain"], "x"), {})
    head = _header(Path(man["path"]))
    assert head["license"] == "unknown" and [c["config_name"] for c in head["configs"]] == ["plain"]
    assert head["bonforge"]["rows"] == {"plain": {"train": 3}}
    assert datasets.load_dataset(man["path"], split="train").num_rows == 3


def test_two_versions_alike_in_name_and_layout_never_share_datasets_cache(tmp_path):
    """`datasets` keys its cache of a local folder by the folder's name and its card: two stores' `ds/v1` with
    other rows must each load their own."""
    import datasets

    for store, n in (("a", 7), ("b", 9)):
        man = publish(tmp_path / store, "ds", formats(genselect(n), ["plain"], "x"), {})
        assert datasets.load_dataset(man["path"], split="train").num_rows == n


def test_a_validation_split_without_rows_is_left_out(tmp_path):
    """`datasets` refuses to load an empty split: the version then has a train split only."""
    import datasets

    man = publish(tmp_path, "ds", formats(genselect(2), ["verl"], "x"), {}, validation=Split(0.001, 1))
    assert set(man["files"]) == {"verl/train.parquet"}
    assert not (Path(man["path"]) / "verl" / "validation.parquet").exists()
    assert list(datasets.load_dataset(man["path"])) == ["train"]
