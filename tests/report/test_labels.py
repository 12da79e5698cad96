"""The report lists where our verdicts disagree with a pool's published labels: per teacher, the candidates
labelled, how many disagree, and the problems where we say correct and the label does not (and the reverse)."""

from __future__ import annotations

import re

import pyarrow as pa

from bonforge.report.labels import disagreements, section
from bonforge.storage.catalog import connect
from bonforge.storage.run_record import RunRecord
from bonforge.storage.store import StageStore


def commit(store: StageStore, stage: str, key: str, rows: list[dict], schema=None) -> None:
    store.write_shard(stage, key, 0, pa.Table.from_pylist(rows, schema=schema))
    store.commit(stage, key, 1, version="1", config={}, upstream={})


def labelled_run(tmp_path) -> StageStore:
    store = StageStore(tmp_path / "store")
    # (problem, teacher, published label, our verdict); teacher "s" was sampled: no label; None: our verdict is no
    # label (the machine was too busy): it never disagrees
    rows = [("p1", "a", True, True), ("p2", "a", False, True), ("p3", "a", True, False), ("p3", "a", True, False),
            ("p1", "b", False, False), ("p2", "b", True, True), ("p1", "s", None, True), ("p3", "b", True, None)]
    cands = [{"candidate_id": f"{p}/{t}/{i}", "problem_id": p, "teacher": t, "reference_correct": label}
             for i, (p, t, label, _) in enumerate(rows)]
    status = {True: "correct", False: "wrong_answer", None: "infra_error"}
    verdicts = [{"candidate_id": f"{p}/{t}/{i}", "problem_id": p, "teacher": t, "correct": bool(ours),
                 "status": status[ours]} for i, (p, t, _, ours) in enumerate(rows)]
    commit(store, "candidates", "c", cands, pa.schema([("candidate_id", pa.string()), ("problem_id", pa.string()),
                                                        ("teacher", pa.string()), ("reference_correct", pa.bool_())]))
    commit(store, "verdicts", "v", verdicts)
    store.record_run(RunRecord.from_json({"run_id": "r1", "recipe_name": "r", "status": "succeeded",
                      "stages": {"candidates": ["c"], "verdicts": ["v"]}, "cached": {}}))
    return store


def test_disagreements_per_teacher_with_their_problems(tmp_path):
    con = connect(labelled_run(tmp_path), "r1")
    assert disagreements(con) == [
        {"teacher": "a", "labelled": 4, "disagree": 3, "we_say_correct": ["p2"], "label_says_correct": ["p3"]},
        {"teacher": "b", "labelled": 3, "disagree": 0, "we_say_correct": [], "label_says_correct": []}]
    page = section(con)
    cells = [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", page)[1:]]
    assert cells == [["a", "4", "3", "p2", "p3"], ["b", "3", "0", "none", "none"]]


def test_no_labels_no_section(tmp_path):
    store = StageStore(tmp_path / "store")
    commit(store, "candidates", "c", [{"candidate_id": "p1/s/0", "problem_id": "p1", "teacher": "s",
                                       "reference_correct": None}],
           pa.schema([("candidate_id", pa.string()), ("problem_id", pa.string()), ("teacher", pa.string()),
                      ("reference_correct", pa.bool_())]))
    commit(store, "verdicts", "v", [{"candidate_id": "p1/s/0", "correct": True, "status": "correct"}])
    store.record_run(RunRecord.from_json({"run_id": "r1", "recipe_name": "r", "status": "succeeded",
                      "stages": {"candidates": ["c"], "verdicts": ["v"]}, "cached": {}}))
    assert section(connect(store, "r1")) == ""
