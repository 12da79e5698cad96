"""Re-judges counted at commit (``bonforge.engine.rejudge``): verdicts stored under an earlier judge and judged
again because its fingerprint moved, and how many of them flipped, against the stored old verdicts; never a
row reused, a row judged again by the same judge, or a row whose verification settings changed."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from test_reuse_rows import RECIPE, candidates_of, problems, verdicts

from bonforge.config import Recipe
from bonforge.engine import run_node
from bonforge.judging import math as verify_math
from bonforge.report.diff import diff, resolve
from bonforge.stage import Ref
from bonforge.stages import verify
from bonforge.storage.run_record import RunRecord
from bonforge.storage.store import StageStore

TEXTS = [lambda pid, j: f"\\boxed{{{int(pid[1:]) * 2}}}", lambda pid, j: "\\boxed{7}"]  # right, wrong


def _judge(monkeypatch, fingerprint: str, status_of=None) -> None:
    """The judge under another fingerprint; ``status_of``: candidate_id -> the status it now gives (correct
    where "correct"), the real judge's elsewhere."""
    monkeypatch.setattr(verify, "fingerprint", lambda *a: fingerprint)
    real = verify_math.verify_math if not hasattr(verify_math.verify_math, "real") else verify_math.verify_math.real

    def judged(candidates, problems, cfg):
        out = real(candidates, problems, cfg)
        ids = out.column("candidate_id").to_pylist()
        status = [(status_of or {}).get(c, s) for c, s in zip(ids, out.column("status").to_pylist())]
        out = out.set_column(out.schema.get_field_index("status"), out.schema.field("status"), pa.array(status))
        return out.set_column(out.schema.get_field_index("correct"), out.schema.field("correct"),
                              pc.equal(out.column("status"), "correct"))

    judged.real = real
    monkeypatch.setattr(verify_math, "verify_math", judged)


def test_a_moved_judge_counts_its_rejudges_and_flips(tmp_path, monkeypatch):
    store, recipe = StageStore(tmp_path), Recipe.model_validate(RECIPE)
    first = verdicts(store, "a", problems(3), candidates_of(problems(3), TEXTS), recipe)
    assert (first["rows_computed"], first["rows_rejudged"], first["rows_flipped"]) == (6, 0, 0)  # nothing stored

    _judge(monkeypatch, "judge v2", {"p001/t/1": "correct", "p002/t/0": "timeout"})
    moved = verdicts(store, "b", problems(3), candidates_of(problems(3), TEXTS), recipe)
    assert moved["key"] != first["key"] and moved["rows_computed"] == 6
    # two flips: a wrong answer now correct, a right one now a timeout (never reused, still compared)
    assert (moved["rows_rejudged"], moved["rows_flipped"]) == (6, 2)

    _record(store, {"before": first, "after": moved})
    shown = diff(store, resolve(store, "before"), resolve(store, "after"))  # `bonforge diff` lists those flips
    assert shown["flipped"] == 2 and {f["candidate_id"]: f["b"]["status"] for f in shown["flips"]} == {
        "p001/t/1": "correct", "p002/t/0": "timeout"}

    # the same judge again: its labels reused; the timeout (no label) judged again, against the only stored
    # label of its text, the first judge's
    again = verdicts(store, "c", problems(3), candidates_of(problems(3), TEXTS), recipe)
    assert (again["rows_reused"], again["rows_computed"]) == (5, 1)
    assert (again["rows_rejudged"], again["rows_flipped"]) == (1, 1)
    _judge(monkeypatch, "judge v2", {"p001/t/1": "correct"})  # the machine idle again: the timeout is correct
    idle = verdicts(store, "d", problems(3), candidates_of(problems(3), TEXTS), recipe)
    assert (idle["rows_computed"], idle["rows_rejudged"], idle["rows_flipped"]) == (1, 1, 0)


def _record(store: StageStore, outputs: dict) -> None:
    for i, (run_id, man) in enumerate(outputs.items()):
        store.record_run(RunRecord.from_json({"run_id": run_id, "recipe_name": "r", "status": "succeeded",
                                              "started": f"2026-01-01T00:00:0{i}Z",
                                              "stages": {"verdicts": [man["key"]]}}))


def test_the_same_judge_again_or_other_settings_are_no_rejudges(tmp_path, monkeypatch):
    store, recipe = StageStore(tmp_path), Recipe.model_validate(RECIPE)
    table, cands = problems(3), candidates_of(problems(3), TEXTS)
    verdicts(store, "a", table, cands, recipe)
    node = verify.node(recipe, Ref("problems", "a"), Ref("candidates", "a", store.manifest("candidates", "a")),
                       {"math"})
    store.uncommit("verdicts", node.key)
    fresh = run_node(store, node, reuse_rows=False)  # judged again from scratch by the same judge
    assert fresh["rows_computed"] == 6 and (fresh["rows_rejudged"], fresh["rows_flipped"]) == (0, 0)

    _judge(monkeypatch, "judge v2", {"p000/t/0": "wrong_answer"})
    looser = Recipe.model_validate({**RECIPE, "verify": {"math": {"float_rounding": 2}}})
    other = verdicts(store, "b", table, cands, looser)  # other settings: not the same verdict asked again
    assert other["rows_computed"] == 6 and (other["rows_rejudged"], other["rows_flipped"]) == (0, 0)


def test_rejudges_match_the_newest_stored_verdict_by_content_not_by_id(tmp_path, monkeypatch):
    """Candidates renamed between builds (another recipe's ids) are matched by their content; each is compared
    with the verdict of the newest output that holds it."""
    store, recipe = StageStore(tmp_path), Recipe.model_validate(RECIPE)
    table = problems(2)
    verdicts(store, "a", table, candidates_of(table, TEXTS), recipe)
    _judge(monkeypatch, "judge v2", {"p000/t/1": "correct"})
    second = verdicts(store, "b", table, candidates_of(table, TEXTS), recipe)
    assert (second["rows_rejudged"], second["rows_flipped"]) == (4, 1)
    renamed = candidates_of(table, TEXTS)
    renamed = renamed.set_column(0, "candidate_id", pc.binary_join_element_wise("other/", renamed.column(0), ""))
    _judge(monkeypatch, "judge v3")  # the real judge's verdicts: the one flip of v2 flips back
    third = verdicts(store, "c", table, renamed, recipe)
    assert (third["rows_rejudged"], third["rows_flipped"]) == (4, 1)
