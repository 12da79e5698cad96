"""One run record, two constructors: a build's and a derived run's, the JSON `bonforge runs` and the viewer read."""

from __future__ import annotations

from pathlib import Path

from bonforge.config import load_recipe
from bonforge.storage.run_record import RunRecord
from bonforge.storage import liveness

BASE = {"run_id": "b1", "recipe_name": "r", "recipe": {"name": "r"}, "status": "succeeded",
        "stages": {"problems": ["p"], "verdicts": ["v1", "v2"], "selector_eval": ["old"]},
        "cached": {}, "dataset": "/store/datasets/r/v1", "dataset_version": 1, "rows": {}}


def test_a_derived_run_has_the_base_stages_cached_and_its_own_stage():
    rec = RunRecord.derived(BASE, "eval-selector", "selector_eval", "new", "selector_eval", False, 1.23456,
                            selector={"engine": "openai", "model": "m"}, summary={"prompts": 3}).json()
    assert set(rec) == {"run_id", "kind", "base_run", "recipe_name", "recipe", "status", "started", "finished",
                        "wall_s", "stages", "cached", "timings", "dataset", "dataset_version", "selector", "summary"}
    assert rec["stages"] == {"problems": ["p"], "verdicts": ["v1", "v2"], "selector_eval": ["new"]}
    assert rec["cached"] == {"problems": ["p"], "verdicts": ["v1", "v2"]}
    assert (rec["kind"], rec["base_run"], rec["status"], rec["wall_s"], rec["timings"]) == (
        "eval-selector", "b1", "succeeded", 1.235, {"selector_eval": 1.235})
    assert rec["started"] == rec["finished"] and rec["dataset_version"] == 1 and rec["summary"] == {"prompts": 3}
    again = RunRecord.derived(BASE, "maxk", "selector_eval", "new", "selector_eval", True, 0.0).json()
    assert again["cached"]["selector_eval"] == ["new"] and again["run_id"] != rec["run_id"]


def test_a_build_record_holds_only_what_the_build_has_so_far():
    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "gsm8k-genselect.yaml")
    stages: dict[str, list[str]] = {}
    record = RunRecord.build(recipe, "r1", stages, {})
    stages["problems"] = ["p"]  # the run's own map, filled as the DAG is walked
    start = record.json()
    assert set(start) == {"run_id", "recipe_name", "recipe", "status", "started", "stages", "cached", "process"}
    assert start["status"] == "running" and start["stages"] == {"problems": ["p"]}
    assert start["process"] == liveness.stamp()  # who writes it: a reader can tell when it is gone
    assert start["recipe"] == recipe.model_dump(mode="json")
    record.status, record.error = "failed", "DataError: bad"
    assert set(record.json()) - set(start) == {"error"}


def test_a_build_returns_its_record_typed(tmp_path):
    """``execute`` hands the caller the RunRecord it wrote, not a dict: the CLI reads its attributes (the report's
    path set on it after the build), and as a mapping it is the JSON on disk."""
    from bonforge.engine.run import CommittedRun, execute
    from bonforge.storage.store import StageStore

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "gsm8k-genselect.yaml")
    store = StageStore(tmp_path / "store")

    def dag(recipe, run, recipe_dir):
        return {"path": "/store/datasets/r/v3", "version": 3}

    record = execute(dag, CommittedRun(store, recipe), ".", "r9", record_start=False)
    assert isinstance(record, RunRecord)
    assert (record.run_id, record.status, record.dataset_version, record.report) == ("r9", "succeeded", 3, None)
    assert dict(record) == record.json() == store.runs()[-1]
    record.report = "/store/reports/r9/report.html"
    assert record["report"] == record.report and record.get("error") is None


def test_wall_time_counts_the_whole_build(tmp_path, monkeypatch):
    """A build's ``wall_s`` runs from the call, through its early stages and the start of its services, to the
    end: not from when the flow began walking the DAG (9 s recorded for a 39 s build)."""
    import time

    import bonforge.engine.prefect as prefect
    from bonforge import engine
    from bonforge.engine.run import CommittedRun, NotCommitted, execute
    from bonforge.storage.store import StageStore

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "gsm8k-genselect.yaml")
    store = StageStore(tmp_path / "store")
    walks = []

    def dag(recipe, run, recipe_dir):
        walks.append(type(run).__name__)
        if len(walks) == 1:
            time.sleep(0.6)  # the early stages, computed before any service starts
            raise NotCommitted("verdicts")
        return {"path": "/store/datasets/r/v1", "version": 1}

    def compute(dag, recipe, store_root, recipe_dir, run_id, done, since):
        time.sleep(0.6)  # Prefect's and Ray's start
        return execute(dag, CommittedRun(StageStore(store_root), recipe), recipe_dir, run_id, True, since=since)

    monkeypatch.setattr(prefect, "compute", compute)
    t0 = time.time()
    record = engine.build(dag, recipe, str(store.root), ".", "r1")
    took = time.time() - t0
    assert len(walks) == 2 and 1.2 <= record.wall_s <= took + 0.01
    assert record.started <= store.runs()[-1]["finished"] and store.runs()[-1]["wall_s"] == record.wall_s
    from datetime import datetime, timezone

    started = datetime.strptime(record.started, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    assert abs((started - datetime.fromtimestamp(t0, timezone.utc)).total_seconds()) < 0.2


def test_the_store_reads_its_records_back_typed_with_unknown_keys_kept(tmp_path):
    from bonforge.storage.store import StageStore

    store = StageStore(tmp_path / "store")
    written = RunRecord.derived(BASE, "eval-selector", "selector_eval", "new", "selector_eval", False, 1.0,
                                selector={"model": "m"}, summary={"accuracy": 0.5})
    store.record_run(written)
    (back,) = store.runs()
    assert isinstance(back, RunRecord) and store.run(back.run_id[:8]) is not None
    assert back.kind == "eval-selector" and back.base_run == BASE["run_id"] and back.timings == {"selector_eval": 1.0}
    assert back.extra == {"selector": {"model": "m"}, "summary": {"accuracy": 0.5}}
    assert back.json() == written.json()


def test_a_record_prints_as_one_short_line_without_its_recipe():
    """`store.runs()` in a notebook: each record one line, not the ~4 KB recipe it holds; a build's line says what
    it kept, as `bonforge run` ends with it."""
    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "gsm8k-genselect.yaml")
    record = RunRecord.build(recipe, "r1", {"problems": ["p"], "verdicts": ["v1", "v2"]}, {})
    record.status, record.dataset_version, record.report = "succeeded", 3, "/store/reports/r1/report.html"
    record.build_summary = {"problems": 300, "kept": 108, "dropped": {"too_hard": 101, "too_easy": 91}}
    assert repr(record) == ("<RunRecord r1 of gsm8k-genselect: succeeded, 2 stages, 108 of 300 problems kept, "
                            "dataset v3, report /store/reports/r1/report.html>")
    assert len(repr([record, record])) < 300 and record.recipe["name"] == "gsm8k-genselect"
