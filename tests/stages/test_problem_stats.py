import itertools
from math import comb

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from fakes import brute_majority

from bonforge.config import FilterConfig, ScoreConfig
from bonforge.selection.metrics import default_ks, max_at_k, pass_at_k
from bonforge.schema import DropReason
from bonforge.stages.problem_stats import drop_reason, score


def test_filter_keeps_open_interval_and_records_why():
    cfg = FilterConfig()
    assert drop_reason(4, 0.0, cfg) is DropReason.TOO_HARD
    assert drop_reason(4, 0.25, cfg) is None
    assert drop_reason(4, 0.5, cfg) is None
    assert drop_reason(4, 0.75, cfg) is DropReason.TOO_EASY
    assert drop_reason(1, 0.0, cfg) is DropReason.TOO_FEW_CANDIDATES


def test_score_table_overall_and_per_teacher():
    v = pa.table({
        "problem_id": ["a"] * 4 + ["b"] * 2,
        "teacher": ["t1", "t1", "t2", "t2", "t1", "t2"],
        "candidate_id": ["a/t1/0", "a/t1/1", "a/t2/0", "a/t2/1", "b/t1/0", "b/t2/0"],
        "correct": [True, False, False, False, True, True],
        "reward": [1.0, 0.0, 0.0, 0.0, 1.0, 1.0],
        "extracted": ["5", "4", "4", None, "7", "7"],
    })
    out = {(r["problem_id"], r["teacher"]): r for r in score(v, ScoreConfig(), FilterConfig()).to_pylist()}
    assert set(out) == {("a", "*"), ("a", "t1"), ("a", "t2"), ("b", "*"), ("b", "t1"), ("b", "t2")}
    a = out[("a", "*")]
    assert (a["n"], a["n_correct"], a["pass_rate"], a["keep"]) == (4, 1, 0.25, True)
    assert dict(a["pass_at_k"]) == {1: 0.25, 2: 0.5, 4: 1.0}
    assert dict(a["majority_at_k"])[4] == 0.0  # "4" wins 2 votes to 1
    assert out[("a", "t2")]["n_correct"] == 0
    b = out[("b", "*")]
    assert b["keep"] is False and b["drop_reason"] == "too_easy"


def test_a_problem_stopped_early_is_too_easy_on_the_samples_a_full_build_draws():
    v = pa.table({
        "problem_id": ["a"] * 3 + ["k"] * 8,
        "teacher": ["t"] * 11,
        "candidate_id": [f"a/t/{i}" for i in range(3)] + [f"k/t/{i}" for i in range(8)],
        "correct": [True] * 3 + [True, False] * 4,
        "reward": [1.0] * 3 + [1.0, 0.0] * 4,
        "extracted": ["5"] * 11,
        "stopped_early": [True] * 3 + [False] * 8,
        "n_planned": [4] * 3 + [8] * 8,
    })
    cfg = FilterConfig(max_pass_rate=0.5, min_candidates=4)
    out = {(r["problem_id"], r["teacher"]): r for r in score(v, ScoreConfig(), cfg).to_pylist()}
    a = out[("a", "*")]  # 3 drawn, fewer than min_candidates, but a full build draws 4: too easy, not too few
    assert (a["n"], a["stopped_early"], a["n_planned"], a["drop_reason"]) == (3, True, 4, "too_easy")
    k = out[("k", "*")]
    assert (k["n"], k["stopped_early"], k["n_planned"], k["keep"]) == (8, False, 8, True)
    plain = score(v.drop_columns(["stopped_early", "n_planned"]), ScoreConfig(), cfg).to_pylist()
    assert {r["n_planned"] for r in plain} == {None} and not any(r["stopped_early"] for r in plain)


def _old_majority(answers, correct, k, seed_text):
    """majority@k as the stage computed it before it was vectorised: exact enumeration when C(n, k) <= 512,
    else 512 seeded random subsets."""
    from bonforge.selection.metrics import _answer_groups, _sampled_majority, _votes

    groups, gc = _answer_groups(answers, correct)
    if not len(gc):
        return None
    if comb(len(answers), k) > 512:
        return _sampled_majority(groups, gc, k, seed_text)
    index = np.array(list(itertools.combinations(range(len(answers)), k)))
    return float(np.mean(_votes(groups[index], gc)))


def _reference_rows(v: pa.Table, ks_cfg, filter_cfg) -> dict:
    """The per-problem, per-teacher loop the vectorised stage replaced."""
    rows = {}
    recs = sorted(v.to_pylist(), key=lambda r: (r["problem_id"], r["teacher"], r["candidate_id"]))
    by_pid: dict = {}
    for r in recs:
        by_pid.setdefault(r["problem_id"], []).append(r)
    for pid, group in by_pid.items():
        parts = [("*", group)] + [(t, [r for r in group if r["teacher"] == t])
                                  for t in sorted({r["teacher"] for r in group})]
        reason = drop_reason(len(group), sum(r["correct"] for r in group) / len(group), filter_cfg)
        for teacher, g in parts:
            n, c = len(g), sum(r["correct"] for r in g)
            ks = [k for k in (ks_cfg or default_ks(n)) if k <= n]
            answers, correct = [r["extracted"] for r in g], [r["correct"] for r in g]
            rewards = np.array([r["reward"] for r in g])
            rows[(pid, teacher)] = {
                "n": n, "n_correct": c, "pass_rate": c / n, "mean_reward": float(rewards.mean()),
                "pass_at_k": [(k, pass_at_k(n, c, k)) for k in ks],
                "majority_at_k": [(k, _old_majority(answers, correct, k, f"{pid}/{teacher}")) for k in ks]
                if any(a is not None for a in answers) else None,
                "max_at_k": [(k, max_at_k(rewards, k)) for k in ks],
                "keep": reason is None, "drop_reason": reason,
            }
    return rows


def _random_verdicts(seed: int, problems: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ["problem_id", "teacher", "candidate_id", "correct", "reward", "extracted"]}
    for p in range(problems):
        wide = p % 10 == 0  # 40 candidates with 20 answers: majority@k must be sampled for middle k
        alphabet = [str(i) for i in range(20 if wide else 4)] + [None]
        fractional = p % 3 == 0
        for t in range(1 if wide else int(rng.integers(1, 4))):
            for s in range(40 if wide else int(rng.integers(1, 9))):
                a = alphabet[int(rng.integers(len(alphabet)))]
                ok = a == "0" if rng.random() < 0.9 else bool(rng.random() < 0.5)
                cols["problem_id"].append(f"p{p:03d}")
                cols["teacher"].append(f"t{t}")
                cols["candidate_id"].append(f"p{p:03d}/t{t}/{s:02d}")
                cols["correct"].append(ok)
                cols["reward"].append(float(rng.random()) if fractional else float(ok))
                cols["extracted"].append(a)
    return pa.table(cols)


def _close(a, b) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(ka == kb and _close(va, vb) for (ka, va), (kb, vb) in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-12
    return a == b


@pytest.mark.parametrize("ks", [None, [1, 3, 5, 16]])
def test_vectorised_stage_matches_the_per_problem_loop(ks):
    """Same rows and values as before, except majority@k where the loop sampled and it is now exact: there
    it matches brute force; where the stage still samples, it draws the same subsets (same values)."""
    v = _random_verdicts(7, 120)
    got = {(r["problem_id"], r["teacher"]): r for r in score(v, ScoreConfig(ks=ks), FilterConfig()).to_pylist()}
    want = _reference_rows(v, ks, FilterConfig())
    assert list(got) == list(want)  # the order too: per problem, "*" first, then each teacher
    n_sampled = 0
    for key, w in want.items():
        g = got[key]
        for col in ["n", "n_correct", "pass_rate", "mean_reward", "pass_at_k", "max_at_k", "keep", "drop_reason"]:
            assert _close(g[col], w[col]), (key, col, g[col], w[col])
        if w["majority_at_k"] is None:
            assert g["majority_at_k"] is None
            continue
        by_pid = v.filter(pc.equal(v["problem_id"], key[0])).to_pylist()
        rows = [r for r in sorted(by_pid, key=lambda r: (r["teacher"], r["candidate_id"]))
                if key[1] == "*" or r["teacher"] == key[1]]
        answers, correct = [r["extracted"] for r in rows], [r["correct"] for r in rows]
        for (k, gv), (_, wv) in zip(g["majority_at_k"], w["majority_at_k"]):
            if comb(len(answers), k) <= 512:
                assert abs(gv - wv) <= 1e-12, (key, k)
            elif len(answers) <= 16:
                assert abs(gv - brute_majority(answers, correct, k)) <= 1e-12, (key, k)
            elif gv == wv:
                n_sampled += 1  # still sampled: the same seeded draws
    assert n_sampled >= 10


def test_a_drop_reason_is_one_code_whatever_the_numbers():
    """Two problems too easy at different pass rates carry the same code (a GROUP BY gives one row per reason;
    before, the rate was written into the reason)."""
    v = pa.table({
        "problem_id": ["a"] * 4 + ["b"] * 4,
        "teacher": ["t"] * 8,
        "candidate_id": [f"{p}/t/{i}" for p in "ab" for i in range(4)],
        "correct": [True, True, True, False, True, True, True, True],
        "reward": [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0],
        "extracted": ["1"] * 8,
    })
    out = score(v, ScoreConfig(), FilterConfig()).filter(pc.equal(pc.field("teacher"), "*"))
    assert out.column("drop_reason").to_pylist() == ["too_easy", "too_easy"]
    assert {DropReason(r).words for r in out.column("drop_reason").to_pylist()} == {"too easy"}


def _with_references(model_correct: list[bool], n_reference: int) -> pa.Table:
    n = len(model_correct)
    return pa.table({
        "problem_id": ["p"] * (n + n_reference),
        "teacher": ["m"] * n + ["reference"] * n_reference,
        "candidate_id": [f"p/m/{i}" for i in range(n)] + [f"p/reference/{i}" for i in range(n_reference)],
        "correct": model_correct + [True] * n_reference,
        "reward": [float(c) for c in model_correct] + [1.0] * n_reference,
        "extracted": ["1" if c else "2" for c in model_correct] + ["1"] * n_reference,
    })


def _recipe(*overrides: str):
    from bonforge.config import Recipe, apply_overrides

    raw = {"name": "r", "problems": {"name": "p", "source": {"path": "p.jsonl"}}, "export": {"name": "d"},
           "teachers": [{"name": "m", "engine": "pool", "source": {"path": "p.jsonl"}, "samples": "s", "text": "t"}]}
    return Recipe.model_validate(apply_overrides(raw, list(overrides)))


def _stats(recipe_overrides: list[str], verdicts: pa.Table) -> dict:
    """problem_stats rows by teacher as the recipe's node computes them."""
    from bonforge.stages import problem_stats as stage

    p = stage.node(_recipe(*recipe_overrides), []).params
    out = stage.STAGE.compute(verdicts, score_cfg=p.score_cfg, filter_cfg=p.filter_cfg, reference=p.reference)
    return {r["teacher"]: r for r in out.to_pylist()}


def test_reference_solutions_do_not_count_in_the_filter():
    """The issue's case: the model solved a problem 0 of 4 times; its 10 reference solutions made the overall
    pass rate 10/14 = 0.714 and the problem was dropped as too easy. The filter reads the model's rate."""
    v = _with_references([False] * 4, 10)
    rows = _stats(["problems.include_reference=true"], v)
    star = rows["*"]
    assert (star["n"], star["n_correct"], star["pass_rate"]) == (4, 0, 0.0)
    assert star["drop_reason"] == "too_hard" and star["drop_detail"] == "pass rate 0.000 <= min_pass_rate 0 (0 of 4)"
    assert (rows["reference"]["n"], rows["reference"]["pass_rate"]) == (10, 1.0)  # kept as a row of its own
    assert list(rows) == ["*", "m", "reference"]
    # a problem the model solves 1 of 4 times is kept, whatever its references
    assert _stats(["problems.include_reference=true"], _with_references([True] + [False] * 3, 10))["*"]["keep"]
    # counted only where the recipe asks: then the old figure
    counted = _stats(["problems.include_reference=true", "filter.count_reference=true"], v)["*"]
    assert (counted["n"], round(counted["pass_rate"], 3), counted["drop_reason"]) == (14, 0.714, "too_easy")
    assert counted["drop_detail"] == "pass rate 0.714 > max_pass_rate 0.5 (10 of 14)"


def test_a_problem_with_only_reference_solutions_has_too_few_candidates():
    star = _stats(["problems.include_reference=true"], _with_references([], 3))["*"]
    assert (star["n"], star["pass_rate"], star["keep"], star["drop_reason"]) == (0, 0.0, False, "too_few_candidates")
    assert star["pass_at_k"] == [] and star["majority_at_k"] is None


def test_the_reference_setting_enters_the_key_only_where_it_acts():
    from bonforge.stages import problem_stats as stage

    def key(*overrides):
        return stage.node(_recipe(*overrides), []).key

    plain = key()
    assert key("filter.count_reference=true") == plain  # no references: nothing to count
    assert key("problems.include_reference=true") != plain
    assert key("problems.include_reference=true", "filter.count_reference=true") == plain  # all counted, as before


def test_suite_strength_counts_known_wrong_candidates_the_tests_reject():
    """Of the candidates labelled wrong, those judged on the tests (not compile_error, not sandbox_error):
    the share rejected; a problem without any has none (null) and is never dropped as weak."""
    v = pa.table({
        "problem_id": ["a"] * 5 + ["b"] * 2,
        "teacher": ["ref", "wrong", "wrong", "wrong", "wrong", "ref", "ref"],
        "candidate_id": ["a/ref/0", "a/wrong/0", "a/wrong/1", "a/wrong/2", "a/wrong/3", "b/ref/0", "b/ref/1"],
        "correct": [True, False, True, False, False, True, False],
        "reward": [1.0, 0.5, 1.0, 0.0, 0.0, 1.0, 0.0],
        "extracted": [None] * 7,
        "status": ["passed", "wrong_answer", "passed", "compile_error", "timeout", "passed", "wrong_answer"],
        "reference_correct": [True, False, False, False, False, None, None],
    })
    out = {(r["problem_id"], r["teacher"]): r for r in score(v, ScoreConfig(), FilterConfig()).to_pylist()}
    a = out[("a", "*")]
    assert (a["n_known_wrong"], a["suite_strength"]) == (3, 2 / 3)  # the compile_error says nothing
    assert (out[("a", "wrong")]["n_known_wrong"], out[("a", "ref")]["n_known_wrong"]) == (3, 0)
    assert out[("a", "ref")]["suite_strength"] is None
    assert (out[("b", "*")]["n_known_wrong"], out[("b", "*")]["suite_strength"]) == (0, None)
    strict = FilterConfig(max_pass_rate=1.0, min_suite_strength=0.9)
    dropped = {r["problem_id"]: r["drop_reason"] for r in score(v, ScoreConfig(), strict).to_pylist()
               if r["teacher"] == "*"}
    assert dropped == {"a": DropReason.WEAK_TESTS.value, "b": None}
    detail = next(r["drop_detail"] for r in score(v, ScoreConfig(), strict).to_pylist() if r["teacher"] == "*")
    assert detail == "suite strength 0.667 < min_suite_strength 0.9"
    assert {r["drop_reason"] for r in score(v, ScoreConfig(), FilterConfig(max_pass_rate=1.0)).to_pylist()} == {None}
    plain = score(v.drop_columns(["status", "reference_correct"]), ScoreConfig(), FilterConfig())
    assert set(plain.column("n_known_wrong").to_pylist()) == {0}  # no labels read: nothing known


def test_verdicts_without_a_label_count_nowhere():
    """``sandbox_error`` and ``infra_error`` (schema.NO_LABEL) are in no n, pass rate, pass@k or reward: the
    problem is scored as if they were not there; a problem with nothing else keeps an overall row, n 0,
    dropped as having too few candidates (before: each counted as a wrong candidate, a 'too hard' problem)."""
    v = pa.table({
        "problem_id": ["a"] * 4 + ["b"] * 2,
        "teacher": ["t1", "t1", "t2", "t2", "t1", "t2"],
        "candidate_id": ["a/t1/0", "a/t1/1", "a/t2/0", "a/t2/1", "b/t1/0", "b/t2/0"],
        "correct": [True, False, False, False, False, False],
        "reward": [1.0, 0.0, 0.5, 0.0, 0.0, 0.0],
        "extracted": [None] * 6,
        "status": ["passed", "wrong_answer", "infra_error", "sandbox_error", "infra_error", "sandbox_error"],
    })
    rows = score(v, ScoreConfig(), FilterConfig())
    out = {(r["problem_id"], r["teacher"]): r for r in rows.to_pylist()}
    assert set(out) == {("a", "*"), ("a", "t1"), ("b", "*")}
    assert [(r["problem_id"], r["teacher"]) for r in rows.to_pylist()] == [("a", "*"), ("a", "t1"), ("b", "*")]
    a = out[("a", "*")]
    assert (a["n"], a["n_correct"], a["pass_rate"], a["mean_reward"]) == (2, 1, 0.5, 0.5)
    b = out[("b", "*")]
    assert (b["n"], b["keep"], b["drop_reason"]) == (0, False, DropReason.TOO_FEW_CANDIDATES.value)
    assert "without a label" in b["drop_detail"]
    assert rows.schema == score(v.filter(pc.equal(v.column("problem_id"), "a")), ScoreConfig(), FilterConfig()).schema
