"""A dataset version's lineage, from the store: the source files by content, the build's summary."""

import pyarrow as pa

from bonforge.config import Recipe
from bonforge.engine.lineage import lineage
from bonforge.storage.store import StageStore


def _commit(store: StageStore, stage: str, key: str, table: pa.Table, config, **extra) -> None:
    store.begin(stage, key, [table.num_rows])
    store.write_shard(stage, key, 0, table)
    store.commit(stage, key, 1, version="1", config=config, upstream={}, extra=extra)


def test_lineage_names_the_sources_the_overrides_and_the_drops(tmp_path):
    store = StageStore(tmp_path / "store")
    recipe = Recipe.model_validate({
        "name": "r", "problems": {"name": "p", "source": {"path": "p.jsonl", "url": "https://example.org/p.jsonl"}},
        "teachers": [{"name": "m", "engine": "pool", "source": {"path": "pool.jsonl"}, "samples": "s", "text": "t"}],
        "export": {"name": "d", "license": "mit"}, "overrides": ["filter.max_pass_rate=0.75"]})  # fmt: skip
    one = pa.table({"x": [1]})
    _commit(store, "problems", "kp", one, {"name": "p", "source": {"sha256": "a" * 64}})
    _commit(store, "candidates", "km", one, {"source": {"size": "3", "sha256": "b" * 64}}, teacher="m")
    _commit(store, "candidates", "kr", one, {"teacher": "reference"}, teacher="reference")  # no file of its own
    stats = pa.table({"problem_id": list("aabcd"), "teacher": ["*", "m", "*", "*", "*"],
                      "keep": [True, True, False, False, False],
                      "drop_reason": [None, None, "too_easy", "too_easy", "too_hard"]})  # fmt: skip
    _commit(store, "problem_stats", "ks", stats, {})
    stages = {"problems": ["kp"], "candidates": ["km", "kr"], "problem_stats": ["ks"]}
    out = lineage(store, recipe, stages)
    assert out["sources"] == [
        {"role": "problems", "path": "p.jsonl", "url": "https://example.org/p.jsonl", "content": {"sha256": "a" * 64}},
        {"role": "teacher m", "path": "pool.jsonl", "url": None, "content": {"size": "3", "sha256": "b" * 64}}]
    assert out["summary"] == {"problems": 1, "kept": 1, "dropped": {"too_easy": 2, "too_hard": 1}, "candidates": 2}
    assert out["overrides"] == ["filter.max_pass_rate=0.75"] and "overrides" not in out["resolved_recipe"]
    assert out["resolved_recipe"]["filter"]["max_pass_rate"] == 0.5 and out["license"] == "mit"
    assert out["stages"] == stages and out["recipe"] == "r" and out["bonforge_version"]
