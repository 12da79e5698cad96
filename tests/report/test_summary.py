"""The summary at the end of every build: problems in, kept, dropped by reason code, candidates, verdicts by
status with the correct ones counted across domains; kept in the run record and printed by `bonforge run`."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from bonforge.config import load_recipe
from bonforge.report.summary import build_summary, summary_lines
from bonforge.storage.store import StageStore

REPO = Path(__file__).resolve().parents[2]


def commit(store: StageStore, stage: str, key: str, rows: list[dict]) -> None:
    store.write_shard(stage, key, 0, pa.Table.from_pylist(rows))
    store.commit(stage, key, 1, version="1", config={}, upstream={})


def a_build(store: StageStore) -> dict[str, list[str]]:
    """Four problems (one maths, three code), two teachers' verdicts, the filter's stats."""
    commit(store, "problems", "p", [{"problem_id": f"p{i}"} for i in range(4)])
    cands = [{"problem_id": f"p{i}", "candidate_id": f"p{i}/{t}/0", "teacher": t} for i in range(4) for t in "ab"]
    commit(store, "candidates", "ca", [c for c in cands if c["teacher"] == "a"])
    commit(store, "candidates", "cb", [c for c in cands if c["teacher"] == "b"])
    statuses = {"p0": ("correct", "wrong_answer"), "p1": ("passed", "passed"), "p2": ("passed", "timeout"),
                "p3": ("runtime_error", "wrong_answer")}
    for j, t in enumerate("ab"):
        commit(store, "verdicts", f"v{t}", [{"problem_id": p, "candidate_id": f"{p}/{t}/0", "teacher": t,
                                             "status": s[j], "correct": s[j] in ("correct", "passed")}
                                            for p, s in statuses.items()])
    reasons = {"p0": None, "p1": "too_easy", "p2": None, "p3": "too_hard"}
    commit(store, "problem_stats", "s", [{"problem_id": p, "teacher": t, "keep": why is None, "drop_reason": why}
                                         for p, why in reasons.items() for t in ("*", "a")])
    return {"problems": ["p"], "candidates": ["ca", "cb"], "verdicts": ["va", "vb"], "problem_stats": ["s"]}


def test_the_summary_counts_kept_dropped_and_verdicts(tmp_path):
    store = StageStore(tmp_path / "store")
    summary = build_summary(store, a_build(store))
    assert summary == {"problems": 4, "kept": 2, "dropped": {"too_easy": 1, "too_hard": 1}, "candidates": 8,
                       "verdicts": {"passed": 3, "wrong_answer": 2, "correct": 1, "runtime_error": 1, "timeout": 1},
                       "correct": 4}
    assert summary_lines(summary) == [
        "problems: 4 in, 2 kept, 2 dropped (too_easy 1, too_hard 1)",
        "candidates: 8",
        "verdicts: 8, 4 correct (passed 3, wrong_answer 2, correct 1, runtime_error 1, timeout 1)"]
    assert build_summary(store, {"problems": ["p"]}) == {"problems": 4}  # an open-ended build: no filter


def test_a_build_records_its_summary(tmp_path):
    from bonforge.engine.run import CommittedRun, execute

    recipe = load_recipe(REPO / "recipes" / "gsm8k-genselect.yaml")
    store = StageStore(tmp_path / "store")
    stages = a_build(store)

    def dag(recipe, run, recipe_dir):
        run.record.update(stages)
        return {"path": "/store/datasets/r/v1", "version": 1}

    record = execute(dag, CommittedRun(store, recipe), ".", "r1", record_start=False)
    assert record.build_summary["kept"] == 2 and store.runs()[-1].build_summary == record.build_summary


def test_a_build_that_judged_again_says_how_many_and_how_many_flipped():
    lines = summary_lines({"verdicts": {"correct": 3}, "correct": 3, "rejudged": 5, "flipped": 2})
    assert lines[-1] == ("re-judged: 5 verdicts stored under an earlier judge (its fingerprint moved), 2 flipped "
                         "(`bonforge diff` lists them)")
    assert not any("re-judged" in x for x in summary_lines({"verdicts": {"correct": 3}, "correct": 3}))


def test_the_summary_counts_verdicts_without_a_label():
    lines = summary_lines({"verdicts": {"passed": 3, "infra_error": 2, "sandbox_error": 1}, "correct": 3})
    assert lines[-1] == ("verdicts without a label: 3 (infra_error 2, sandbox_error 1): in no pass rate, reward or "
                         "export; the next build judges them again")
    assert len(summary_lines({"verdicts": {"passed": 3}, "correct": 3})) == 1


def test_what_a_build_ends_with_names_each_datasets_rows_the_time_and_how_an_unpublished_run_ended(tmp_path):
    import shutil

    from bonforge.report.summary import ending_lines
    from bonforge.storage.datasets import publish
    from bonforge.storage.run_record import RunRecord
    from bonforge.storage.splits import Split

    store = StageStore(tmp_path)
    stages = a_build(store)
    parts = {"verl": pa.table({"problem_id": [f"p{i}" for i in range(40)], "x": range(40)}),
             "plain": pa.table({"problem_id": [f"p{i}" for i in range(40)]})}
    main = publish(tmp_path, "ds", parts, {}, validation=Split(0.25, 7))
    rl = publish(tmp_path, "ds-rl", {"verl": pa.table({"x": [1]})}, {})
    record = RunRecord("r1", "toy", {}, stages, {}, "succeeded", "2000-01-01T00:00:00.000000Z", wall_s=12.34,
                       dataset=main["path"], dataset_version=1, rl_dataset=rl["path"],
                       build_summary=build_summary(store, stages), report=str(tmp_path / "reports/r1/report.html"))
    validation = main["files"]["verl/validation.parquet"]["rows"]
    assert 0 < validation < 40
    assert ending_lines(store, record) == summary_lines(record.build_summary) + [
        f"run r1 in 12.3 s: dataset ds v1 at {main['path']} (40 rows, {validation} of them validation)",
        f"rl dataset: {rl['path']} (1 row)", f"report: {tmp_path / 'reports/r1/report.html'}"]
    shutil.rmtree(rl["path"])  # collected since: said, not read
    assert ending_lines(store, record)[-2] == f"rl dataset: {rl['path']} (no longer in the store)"
    failed = RunRecord("r2", "toy", {}, stages, {}, "failed", "2000-01-01T00:00:00.000000Z", wall_s=3.0)
    assert ending_lines(store, failed)[-1] == "run r2 in 3.0 s: failed"
    derived = RunRecord.derived(record.json(), "maxk", "maxk_weights", "m", "maxk_weights", False, 1.5)
    assert ending_lines(store, derived)[-1] == f"run {derived.run_id} in 1.5 s: succeeded (maxk of run r1)"
