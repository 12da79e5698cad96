"""`bonforge diff` (``bonforge.report.diff``): two runs' verdicts matched by their keys, the flips, the confusion
table, Cohen's kappa against a hand computation, per-problem pass rate and keep changes; runs named by id,
prefix or recipe, and one `error:` line for what cannot be compared. Hostile ids stay data."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
import diff_store
from diff_store import BEFORE, HOSTILE, record, verdicts, write
from typer.testing import CliRunner

import bonforge
from bonforge.cli import app
from bonforge.report.diff import DiffError, diff, lines, pair, resolve
from bonforge.schema import SCORES
from bonforge.storage.store import StageStore


@pytest.fixture
def two_runs(tmp_path):
    return diff_store.two_runs(tmp_path)


def test_flips_confusion_and_kappa_by_hand(two_runs):
    store = two_runs
    out = diff(store, resolve(store, "20260101-a"), resolve(store, "20260101-b"))
    assert (out["matched"], out["only_a"], out["only_b"], out["flipped"]) == (6, 0, 0, 3)
    flips = {f["candidate_id"]: (f["a"]["status"], f["b"]["status"]) for f in out["flips"]}
    assert flips == {"p0/t/1": ("wrong_answer", "correct"), "p1/t/0": ("correct", "wrong_answer"),
                     f"{HOSTILE}/t/1": ("correct", "no_answer")}
    assert [f["problem_id"] for f in out["flips"]] == sorted(f["problem_id"] for f in out["flips"])  # by key
    cells = {(c["a"], c["b"]): c["n"] for c in out["confusion"]}
    assert cells == {("correct", "correct"): 2, ("correct", "wrong_answer"): 1, ("correct", "no_answer"): 1,
                     ("wrong_answer", "correct"): 1, ("timeout", "timeout"): 1}
    # by hand: statuses A: correct 4, wrong_answer 1, timeout 1; B: correct 3, wrong_answer 1, no_answer 1,
    # timeout 1. p_o = 3/6; p_e = (4*3 + 1*1 + 1*1) / 36 = 14/36; kappa = (1/2 - 7/18) / (1 - 7/18) = 2/11
    assert out["agreement"]["status"]["observed"] == pytest.approx(0.5)
    assert out["agreement"]["status"]["kappa"] == pytest.approx(2 / 11)
    # correct / incorrect: A 4 / 2, B 3 / 3; agree on 3 of 6; p_e = (4*3 + 2*3) / 36 = 1/2: kappa 0
    assert out["agreement"]["correct"] == {"observed": pytest.approx(0.5), "kappa": pytest.approx(0.0)}
    assert out["reward_changed"] == 3 and out["teachers"] == [{"teacher": "t", "matched": 6, "flipped": 3}]


def test_pass_rate_and_keep_changes_per_problem(two_runs):
    store = two_runs
    p = diff(store, resolve(store, "20260101-a"), resolve(store, "20260101-b"))["problems"]
    assert (p["compared"], p["pass_rate_changed"], p["kept_a"], p["kept_b"]) == (3, 3, 2, 1)
    assert (p["kept_to_dropped"], p["dropped_to_kept"]) == (2, 1)
    by = {r["problem_id"]: r for r in p["changed"]}
    assert (by["p1"]["pass_rate_a"], by["p1"]["pass_rate_b"], by["p1"]["drop_reason_b"]) == (0.5, 0.0,
                                                                                              "pass_rate_out_of_range")
    assert by[HOSTILE]["keep_b"] and not by[HOSTILE]["keep_a"]
    assert by[HOSTILE]["view"]["b"] == "#problem?run=20260101-bbbbbb&id=p%27%29%3B+DROP+TABLE+j%3B+--%22%3Cb%3E"


def test_limit_keeps_the_first_flips_by_key_and_the_counts_whole(two_runs):
    store = two_runs
    out = diff(store, resolve(store, "20260101-a"), resolve(store, "20260101-b"), limit=1)
    assert out["flipped"] == 3 and [f["candidate_id"] for f in out["flips"]] == [f"{HOSTILE}/t/1"]  # "'" < "0"
    assert len(out["problems"]["changed"]) == 1 and out["problems"]["changed"][0]["problem_id"] == "p1"  # |-0.5|
    none = diff(store, resolve(store, "20260101-a"), resolve(store, "20260101-b"), limit=0)
    assert (none["flipped"], none["flips"], none["problems"]["changed"]) == (3, [], [])


def test_a_teacher_and_partly_shared_candidates(tmp_path):
    store = StageStore(tmp_path)
    write(store, "verdicts", "a1", [verdicts({"p0/t/0": "correct", "p0/t/1": "correct"})])
    write(store, "verdicts", "a2", [verdicts({"p0/u/0": "correct"}, "u")], teacher="u")
    write(store, "verdicts", "b1", [verdicts({"p0/t/1": "wrong_answer", "p0/t/2": "correct"})])
    write(store, "verdicts", "b2", [verdicts({"p0/u/0": "wrong_answer"}, "u")], teacher="u")
    record(store, "ra", {"verdicts": ["a1", "a2"]})
    record(store, "rb", {"verdicts": ["b1", "b2"]})
    whole = diff(store, resolve(store, "ra"), resolve(store, "rb"))
    assert (whole["matched"], whole["only_a"], whole["only_b"], whole["flipped"]) == (2, 1, 1, 2)
    assert whole["teachers"] == [{"teacher": "t", "matched": 1, "flipped": 1},
                                 {"teacher": "u", "matched": 1, "flipped": 1}]
    one = diff(store, resolve(store, "ra"), resolve(store, "rb"), teacher="u")
    assert (one["matched"], one["flipped"], one["a"]["keys"]) == (1, 1, ["a2"])
    with pytest.raises(DiffError, match=r"run ra has no verdicts of teacher \"' OR 1=1 --\" \(its teachers: t, u\)"):
        diff(store, resolve(store, "ra"), resolve(store, "rb"), teacher="' OR 1=1 --")


def test_runs_named_by_prefix_recipe_or_refused(tmp_path, two_runs):
    store = two_runs
    with pytest.raises(DiffError, match=r"prefix '20260101-' is ambiguous: 2 runs start with it \(20260101-aaaaaa, "):
        resolve(store, "20260101-")
    with pytest.raises(DiffError, match=r"^no run \"x'; DROP TABLE runs; --\" in "):
        resolve(store, "x'; DROP TABLE runs; --")
    a, b = pair(store, None, None, "r")  # the recipe's two latest runs
    assert (a.run_id, b.run_id) == ("20260101-aaaaaa", "20260101-bbbbbb")
    assert pair(store, "20260101-a", None, "r")[1].run_id == "20260101-bbbbbb"
    with pytest.raises(DiffError, match="name two runs"):
        pair(store, "20260101-a", None)
    with pytest.raises(DiffError, match="no run of recipe 'other'"):
        pair(store, None, None, "other")
    with pytest.raises(DiffError, match="stage 'problems' cannot be compared; choose verdicts or scores"):
        diff(store, a, b, stage="problems")
    lone = StageStore(tmp_path / "lone")
    write(lone, "verdicts", "v", [verdicts(BEFORE)])
    record(lone, "only", {"verdicts": ["v"]}, recipe="solo")
    with pytest.raises(DiffError, match=r"recipe 'solo' has 1 succeeded run\(s\) in .*: two are needed"):
        pair(lone, None, None, "solo")


def test_nothing_to_compare_is_one_error(two_runs):
    store = two_runs
    record(store, "failed-early", {"problems": []}, recipe="other")
    with pytest.raises(DiffError, match="run failed-early has no committed verdicts or scores: nothing to compare"):
        diff(store, resolve(store, "20260101-a"), resolve(store, "failed-early"))
    write(store, "verdicts", "vc", [verdicts({"q9/t/0": "correct"})])  # another recipe's candidates
    record(store, "other-recipe", {"verdicts": ["vc"]}, recipe="other")
    with pytest.raises(DiffError, match="judged no candidate in common .*: nothing to compare"):
        diff(store, resolve(store, "20260101-a"), resolve(store, "other-recipe"))


def test_the_same_candidates_in_runs_of_two_recipes(two_runs):
    """Two recipes over one pool (two judges): matched by keys, whatever the recipe."""
    store = two_runs
    write(store, "verdicts", "vd", [verdicts(BEFORE)])
    record(store, "judge-two", {"verdicts": ["vd"]}, recipe="another")
    out = diff(store, resolve(store, "20260101-a"), resolve(store, "judge-two"))
    assert (out["matched"], out["flipped"], out["agreement"]["status"]["kappa"]) == (6, 0, pytest.approx(1.0))
    assert out["problems"] is None  # the second run has no problem_stats


def test_one_label_on_both_sides_has_no_kappa(tmp_path):
    store = StageStore(tmp_path)
    for key in ("a", "b"):
        write(store, "verdicts", key, [verdicts({"p0/t/0": "correct", "p0/t/1": "correct"})])
        record(store, key, {"verdicts": [key]})
    out = diff(store, resolve(store, "a"), resolve(store, "b"))
    assert out["agreement"]["status"] == {"observed": 1.0, "kappa": None}
    assert "status 100.00 %, kappa undefined (one label only)" in "\n".join(lines(out))


def test_open_ended_scores_flip_by_value_status_or_label(tmp_path):
    store = StageStore(tmp_path)

    def scores(values: list) -> pa.Table:
        rows = [{"candidate_id": f"p0/t/{i}", "problem_id": "p0", "teacher": "t", "scorer": s, "kind": "reward_model",
                 "value": v, "label": lab, "status": st} for i, (s, v, lab, st) in enumerate(values)]
        return pa.Table.from_pylist([{f.name: r.get(f.name) for f in SCORES} for r in rows], schema=SCORES)

    same = ("rm", 1.5, None, "ok")
    write(store, "scores", "a", [scores([same, ("rm", 0.25, None, "ok"), ("lang", 1.0, "de", "ok")])])
    write(store, "scores", "b", [scores([same, ("rm", 0.5, None, "ok"), ("lang", 1.0, "fr", "ok")])])
    record(store, "a", {"scores": ["a"]})
    record(store, "b", {"scores": ["b"]})
    out = diff(store, resolve(store, "a"), resolve(store, "b"))
    assert out["stage"] == "scores" and (out["matched"], out["flipped"], out["value_changed"]) == (3, 2, 1)
    assert [(f["scorer"], f["a"]["value"], f["b"]["value"]) for f in out["flips"]] == [("rm", 0.25, 0.5),
                                                                                    ("lang", 1.0, 1.0)]
    assert "correct" not in out["agreement"] and out["problems"] is None


def test_cli_lines_json_and_error_line(two_runs):
    store = two_runs
    runner = CliRunner()
    res = runner.invoke(app, ["diff", "20260101-a", "20260101-b", "--store", str(store.root)])
    assert res.exit_code == 0, res.output
    assert "flipped 3" in res.output and "correct -> no_answer: 1" in res.output
    assert "#diff?a=20260101-aaaaaa&b=20260101-bbbbbb&stage=verdicts" in res.output
    res = runner.invoke(app, ["diff", "--recipe", "r", "--json", "--store", str(store.root)])
    assert json.loads(res.output)["flipped"] == 3
    res = runner.invoke(app, ["diff", "2026", "20260101-b", "--store", str(store.root)])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and res.output.startswith("error: run id prefix '2026'")
    assert "Traceback" not in res.output


def test_python_api(two_runs):
    out = bonforge.open(two_runs.root).diff("20260101-a", "20260101-b", teacher="t")
    assert out["flipped"] == 3 and out["teacher"] == "t"


def test_a_damaged_or_collected_output_is_one_error(two_runs):
    store = two_runs
    for path in store.paths("verdicts", "vb"):
        path.write_bytes(b"not parquet")
    with pytest.raises(DiffError, match=r"^cannot compare runs 20260101-aaaaaa and 20260101-bbbbbb: .*Parquet"):
        diff(store, resolve(store, "20260101-a"), resolve(store, "20260101-b"))
    for path in store.paths("verdicts", "vb"):
        path.unlink()
    with pytest.raises(DiffError, match=r"^cannot compare runs .*: IO Error: No files found"):
        diff(store, resolve(store, "20260101-a"), resolve(store, "20260101-b"))


def test_an_id_that_is_another_ids_prefix_names_itself(two_runs):
    store = two_runs
    write(store, "verdicts", "v10", [verdicts(BEFORE)])
    record(store, "20260101-aaaaaa0", {"verdicts": ["v10"]})
    assert resolve(store, "20260101-aaaaaa").run_id == "20260101-aaaaaa"
    with pytest.raises(DiffError, match="ambiguous: 2 runs"):
        resolve(store, "20260101-aaa")
