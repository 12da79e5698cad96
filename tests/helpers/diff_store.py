"""A store of two runs whose verdicts differ, written directly (no build): what the `bonforge diff` tests
and the viewer's diff page read."""

from __future__ import annotations

import pyarrow as pa

from bonforge.schema import PROBLEM_STATS, PROBLEMS, VERDICTS
from bonforge.storage.run_record import RunRecord
from bonforge.storage.store import StageStore

HOSTILE = "p'); DROP TABLE j; --\"<b>"  # a problem id that is SQL and HTML at once
# (candidate, status) before and after; candidates of problem p0 / p1 / HOSTILE
BEFORE = {"p0/t/0": "correct", "p0/t/1": "wrong_answer", "p1/t/0": "correct", "p1/t/1": "timeout",
          f"{HOSTILE}/t/0": "correct", f"{HOSTILE}/t/1": "correct"}
AFTER = {"p0/t/0": "correct", "p0/t/1": "correct", "p1/t/0": "wrong_answer", "p1/t/1": "timeout",
         f"{HOSTILE}/t/0": "correct", f"{HOSTILE}/t/1": "no_answer"}


def verdicts(statuses: dict[str, str], teacher: str = "t") -> pa.Table:
    ids = list(statuses)
    ok = [statuses[c] == "correct" for c in ids]
    return pa.table({"candidate_id": ids, "problem_id": [c.rsplit("/", 2)[0] for c in ids],
                     "teacher": [teacher] * len(ids), "extracted": ["4"] * len(ids), "correct": ok,
                     "reward": [float(x) for x in ok],
                     "status": [statuses[c] for c in ids], "tests_passed": [None] * len(ids),
                     "tests_total": [None] * len(ids), "detail": [None] * len(ids), "latency_ms": [1.0] * len(ids)},
                    schema=VERDICTS)


def write(store: StageStore, stage: str, key: str, tables: list[pa.Table], teacher: str | None = "t") -> str:
    for i, t in enumerate(tables):
        store.write_shard(stage, key, i, t)
    store.commit(stage, key, len(tables), version="1", config={}, upstream={},
                 extra={"teacher": teacher} if teacher else {})
    return key


def stats(rates: dict[str, tuple[float, bool]]) -> pa.Table:
    rows = [{"problem_id": p, "teacher": t, "n": 2, "n_correct": int(2 * r), "pass_rate": r, "mean_reward": r,
             "keep": keep, "drop_reason": None if keep else "pass_rate_out_of_range", "stopped_early": False}
            for p, (r, keep) in rates.items() for t in ("t", "*")]
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in PROBLEM_STATS} for r in rows], schema=PROBLEM_STATS)


def record(store: StageStore, run_id: str, stages: dict, recipe: str = "r", started: str | None = None) -> None:
    store.record_run(RunRecord.from_json({"run_id": run_id, "recipe_name": recipe, "status": "succeeded",
                                          "started": started or f"2026-01-01T00:00:0{len(store.runs())}Z",
                                          "stages": stages}))


def two_runs(root) -> StageStore:
    """Run 20260101-aaaaaa (before) and 20260101-bbbbbb (after): B's rows in another order and two files."""
    store = StageStore(root)
    write(store, "verdicts", "va", [verdicts(BEFORE)])
    shuffled = verdicts(dict(reversed(list(AFTER.items()))))
    write(store, "verdicts", "vb", [shuffled.slice(0, 3), shuffled.slice(3)])
    write(store, "problem_stats", "sa", [stats({"p0": (0.5, True), "p1": (0.5, True), HOSTILE: (1.0, False)})])
    write(store, "problem_stats", "sb", [stats({"p0": (0.75, False), "p1": (0.0, False), HOSTILE: (0.75, True)})])
    write(store, "problems", "pr", [pa.Table.from_pylist([
        {"problem_id": p, "source": "t", "domain": "math", "question": f"Question {p}?", "answer": "4"}
        for p in ("p0", "p1", HOSTILE)], schema=PROBLEMS)], teacher=None)
    record(store, "20260101-aaaaaa", {"problems": ["pr"], "verdicts": ["va"], "problem_stats": ["sa"]})
    record(store, "20260101-bbbbbb", {"problems": ["pr"], "verdicts": ["vb"], "problem_stats": ["sb"]})
    return store
