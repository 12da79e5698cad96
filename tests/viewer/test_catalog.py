"""The viewer holds the catalogs of a few runs at a time: opening one more lets go of the least recently
used, and a request still reading a run that was let go of finishes."""

from __future__ import annotations

import pyarrow as pa

from bonforge.storage.store import StageStore
from bonforge.viewer import catalog
from bonforge.viewer.catalog import Catalog
from bonforge.storage.run_record import RunRecord


def _store(root, n_runs: int) -> StageStore:
    store = StageStore(root)
    for i in range(n_runs):
        key = f"k{i}"
        store.write_shard("problems", key, 0, pa.table({"problem_id": [f"r{i}-p{j}" for j in range(3)]}))
        store.commit("problems", key, 1, version="1", config={}, upstream={})
        store.record_run(RunRecord.from_json({"run_id": f"run{i}", "recipe_name": "x", "status": "succeeded",
                          "stages": {"problems": [key]}}))
    return store


def test_only_the_most_recently_used_runs_stay_open(tmp_path):
    n = catalog.MAX_OPEN + 2
    store = _store(tmp_path / "store", n)
    cat = Catalog(store, cache=tmp_path / "cache", copies=False)
    first = cat.cursor(cat.run("run0"))
    for i in range(1, n):
        cat.cursor(cat.run(f"run{i}"))
    assert list(cat._open) == [f"run{i}" for i in range(2, n)]  # run0 and run1 were let go of
    assert first.execute("SELECT count(*) FROM problems").fetchone() == (3,)  # a reader of run0 still reads
    cur = cat.cursor(cat.run("run2"))  # used again: now the most recent
    assert list(cat._open)[-1] == "run2" and len(cat._open) == catalog.MAX_OPEN
    cat.cursor(cat.run("run0"))  # reopened; run3, the least recently used, goes
    assert "run0" in cat._open and "run3" not in cat._open
    assert cur.execute("SELECT min(problem_id) FROM problems").fetchone() == ("r2-p0",)
    cat.close()
