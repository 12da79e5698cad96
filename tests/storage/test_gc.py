"""`bonforge gc --keep-runs N`: outputs of older runs go, those of kept runs and dataset versions stay, and
row reuse computes again what a removed output held."""

from __future__ import annotations

import pyarrow as pa
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.storage.datasets import publish
from bonforge.storage.gc import collect
from bonforge.storage.store import StageStore
from bonforge.storage.run_record import RunRecord


def commit(store: StageStore, stage: str, key: str) -> None:
    store.write_shard(stage, key, 0, pa.table({"problem_id": ["p"]}))
    store.commit(stage, key, 1, version="1", config={}, upstream={})


def record(store: StageStore, run_id: str, stages: dict, status: str = "succeeded") -> None:
    store.record_run(RunRecord.from_json({"run_id": run_id, "started": run_id, "status": status, "stages": stages}))


def test_gc_keeps_newest_runs_running_runs_and_dataset_lineage(tmp_path):
    store = StageStore(tmp_path)
    for key in ("k1", "k2", "k3", "k4", "k5"):
        commit(store, "candidates", key)
    record(store, "r1", {"candidates": ["k1"]})
    record(store, "r2", {"candidates": ["k2"]})
    record(store, "r3", {"candidates": ["k3"]})
    record(store, "r0", {"candidates": ["k5"]}, status="running")  # oldest, still in progress
    publish(tmp_path, "ds", {"plain": pa.table({"x": [1]})}, {"recipe": "r", "stages": {"candidates": ["k1"]}})
    store.begin("verdicts", "half", [1])  # an interrupted build's output: its rerun resumes it
    (tmp_path / "stages" / "verdicts" / "gone").mkdir(parents=True)  # an interrupted removal's leftover

    dry = collect(store, keep_runs=1, dry_run=True)
    assert [o["key"] for o in dry["outputs"]] == ["k2", "k4"] and store.exists("candidates", "k2")
    out = collect(store, keep_runs=1)
    assert [o["key"] for o in out["outputs"]] == ["k2", "k4"] and out["leftovers"] == [
        {"stage": "verdicts", "key": "gone"}]
    assert sorted(out["runs"]) == ["r1", "r2"]
    assert [k for k in ("k1", "k2", "k3", "k4", "k5") if store.exists("candidates", k)] == ["k1", "k3", "k5"]
    assert not list((tmp_path / "stages" / "candidates" / "k2").iterdir())
    assert (tmp_path / "stages" / "verdicts" / "half" / "plan.json").is_file()
    assert (tmp_path / "datasets" / "ds" / "v1" / "manifest.json").is_file()
    assert sorted(r["run_id"] for r in store.runs()) == ["r0", "r3"]


def test_gc_command(tmp_path):
    store = StageStore(tmp_path)
    commit(store, "candidates", "old")
    commit(store, "candidates", "new")
    record(store, "r1", {"candidates": ["old"]})
    record(store, "r2", {"candidates": ["new"]})
    runner = CliRunner()
    dry = runner.invoke(app, ["gc", "--keep-runs", "1", "--dry-run", "--store", str(tmp_path)])
    assert dry.exit_code == 0 and "would remove candidates/old (1 rows)" in dry.output, dry.output
    assert store.exists("candidates", "old")
    done = runner.invoke(app, ["gc", "--keep-runs", "1", "--store", str(tmp_path)])
    assert done.exit_code == 0 and "removed 1 stage outputs" in done.output, done.output
    assert not store.exists("candidates", "old") and store.exists("candidates", "new")
