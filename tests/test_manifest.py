"""The manifest as read: the engine's fields by name, a stage's own fields in ``extra``, the JSON on disk as it was."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from bonforge.engine.shards import run_node
from bonforge.manifest import Manifest
from bonforge.stage import Stage
from bonforge.storage.store import StageStore


def test_the_engine_fields_are_attributes_and_the_rest_is_extra(tmp_path):
    store = StageStore(tmp_path)
    table = pa.table({"problem_id": ["a", "b", "c"], "n": [1, 2, 3]})
    node = Stage("demo", "1", compute=lambda t: t, table=lambda i: table, shard_rows=2,
                 summary=lambda w: {"n_total": w.read(["n"]).num_rows}).bind({"x": 1}, {}, note={"teacher": "t"})
    man = run_node(store, node)
    assert isinstance(man, Manifest) and not man.cached
    assert (man.stage, man.key, man.version, man.config, man.rows, man.rows_per_file) == ("demo", node.key, "1",
                                                                                          {"x": 1}, 3, [2, 1])
    assert man.shards_resumed == 0 and man.hosts and man.row_index is None and man.counts() == (3, 0)
    assert man.extra == {"teacher": "t", "n_total": 3}
    on_disk = json.loads((tmp_path / "stages" / "demo" / node.key / "manifest.json").read_text())
    assert "cached" not in on_disk and "extra" not in on_disk and on_disk["teacher"] == "t"
    read = store.manifest("demo", node.key)
    assert dict(read) == on_disk and read.extra == man.extra and not read.cached
    assert run_node(store, node).cached and dict(run_node(store, node)) == {**on_disk, "cached": True}


def test_a_manifest_without_an_identity_field_is_refused_by_name():
    with pytest.raises(ValueError, match=r"the manifest of 'demo' k lacks files, rows, rows_per_file, schema"):
        Manifest.from_json({"stage": "demo", "key": "k", "version": "1", "config": {}, "upstream": {}})


def test_counts_of_an_output_with_row_reuse():
    base = {"stage": "s", "key": "k", "version": "1", "config": {}, "upstream": {}, "files": [], "rows": 10,
            "rows_per_file": [10], "schema": []}
    assert Manifest.from_json({**base, "row_index": "rows.parquet", "rows_computed": 4, "rows_reused": 6}).counts() \
        == (4, 6)
