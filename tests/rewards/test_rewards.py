"""The reward functions on their own: GenSelect judgments, math answers under the hard timeout, from
threads; both calling conventions (verl's compute_score, TRL's batched functions)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from bonforge.config import MathVerifyConfig
from bonforge.rewards import completion_text, genselect, math as math_reward

GT = json.dumps([1, 3])
INFO = {"n_candidates": 4, "prompt_id": "p#0"}


@pytest.mark.parametrize("text, score, parsed", [
    ("Candidate 1 is right.\nJudgment: 1", 1.0, 1),
    ("Judgment: 0\n...on reflection\nJudgment: 3", 1.0, 3),  # the last judgment counts
    ("Judgment: **3**", 1.0, 3),
    ("Judgment: 2", 0.0, 2),  # a wrong pick
    ("<think>Judgment: 1 looks right</think>\nJudgment: 2", 0.0, 2),  # reasoning is split off first
    ("<think>maybe Judgment: 1</think>\nI cannot decide.", 0.0, -1),  # a judgment only inside the reasoning
    ("<think>Judgment: 1 and still thinking", 0.0, -1),  # unclosed reasoning: no answer yet
    ("Judgment: 4", 0.0, -1),  # out of range (4 candidates)
    ("Judgment: -1", 0.0, -1),
    ("\x00\ufffd garbage }{ Judgment", 0.0, -1),
    ("", 0.0, -1),
])
def test_genselect_scores_judgments(text, score, parsed):
    out = genselect.compute_score("bonforge/x", text, GT, dict(INFO))
    assert (out["score"], out["parsed"], out["format_ok"]) == (score, parsed, parsed >= 0)


def test_genselect_penalty_for_malformed_answers_is_configurable():
    assert genselect.compute_score("d", "no judgment", GT, INFO, invalid_score=-0.5)["score"] == -0.5
    assert genselect.compute_score("d", "Judgment: 2", GT, INFO, invalid_score=-0.5)["score"] == 0.0


def test_genselect_bad_ground_truth_names_the_field():
    with pytest.raises(ValueError, match=r"reward_model.ground_truth: expected a JSON list of indices"):
        genselect.compute_score("d", "Judgment: 1", "one", INFO)


def test_genselect_trl_batch_takes_conversational_completions_and_dataset_columns():
    completions = [[{"role": "assistant", "content": "Judgment: 1"}], [{"role": "assistant", "content": "x"}],
                   "Judgment: 0"]
    rm = [{"style": "rule", "ground_truth": GT}, {"style": "rule", "ground_truth": GT},
          {"style": "rule", "ground_truth": "[0]"}]
    scores = genselect.genselect_reward(prompts=[None] * 3, completions=completions, reward_model=rm,
                                        extra_info=[INFO] * 3, trainer_state=None)
    assert scores == [1.0, 0.0, 1.0]
    assert completion_text({"role": "assistant", "content": "hi"}) == "hi"


SETTINGS = {"verify": json.dumps(MathVerifyConfig().key_config())}
TOWER = r"so \boxed{2^{2^{2^{2^{2^{2^{2^{2^{2^{2}}}}}}}}}}"


def test_math_scores_answers_with_the_verdict_extraction():
    assert math_reward.compute_score("d", r"... so \boxed{\frac{1}{2}}", "0.5", SETTINGS) == {
        "score": 1.0, "status": "correct", "extracted": r"\frac{1}{2}"}
    assert math_reward.compute_score("d", "#### 1,234", "1234", SETTINGS)["score"] == 1.0
    wrong = math_reward.compute_score("d", r"\boxed{7}", "8", SETTINGS)
    assert (wrong["score"], wrong["status"]) == (0.0, "wrong_answer")
    assert math_reward.compute_score("d", "no idea", "8", SETTINGS)["status"] == "no_answer"
    # the row's settings are the recipe's: GSM8K's `A: x` pattern comes before math-verify's extraction
    gsm8k = {"verify": json.dumps(MathVerifyConfig(patterns=[r"(?m)^A:\s*(.+?)\s*$"]).key_config())}
    text = "A: 7\nCheck: 7 + 1 = 8"
    assert math_reward.compute_score("d", text, "7", gsm8k)["score"] == 1.0
    assert math_reward.compute_score("d", text, "7", SETTINGS)["extracted"] == "8"
    # a worked gold solution is read as the verdicts stage reads it
    assert math_reward.compute_score("d", "She has 4.", "2 + 2 = 4 apples.\nA: 4", gsm8k)["score"] == 1.0


def test_math_hangs_time_out_from_threads_without_sigalrm():
    """Threads (as verl's reward executor uses) check at once; a power tower is killed at the hard limit
    and scores 0 while the other threads' answers still score."""
    results: dict[int, dict] = {}

    def one(i: int) -> None:
        text = TOWER if i == 0 else rf"\boxed{{{i}}}"
        results[i] = math_reward.compute_score("d", text, str(i), SETTINGS, timeout_s=1.5)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert time.perf_counter() - t0 < 30
    assert results[0]["status"] == "timeout" and results[0]["score"] == 0.0
    assert all(results[i] == {"score": 1.0, "status": "correct", "extracted": str(i)} for i in range(1, 6))


def test_math_trl_batch():
    rm = [{"ground_truth": "3"}, {"ground_truth": "4"}, {"ground_truth": "5"}]
    completions = [[{"role": "assistant", "content": r"\boxed{3}"}], "A: 5", r"\boxed{5}"]
    assert math_reward.math_reward([None] * 3, completions, rm, extra_info=[SETTINGS] * 3) == [1.0, 0.0, 1.0]


class EchoPool:
    """A pool that 'runs' each program by printing its first line (no sandbox needed)."""

    def run(self, requests):
        return [{"results": [{"status": "ok", "stdout": r["program"].split("\n")[0], "wall_s": 0.0}
                             for _ in r["tests"]], "latency_s": 0.0} for r in requests]  # fmt: skip


def stdio(*outputs: str, **extra) -> str:
    return json.dumps({"kind": "stdio", "tests": [{"input": "", "output": o} for o in outputs], **extra})


def test_code_rows_with_one_problem_id_are_judged_by_their_own_tests(monkeypatch):
    """Two TRL rows of one problem_id but different tests: the second was judged against the first's."""
    from bonforge.rewards import code

    monkeypatch.setattr(code, "shared_pool", lambda cfg: EchoPool())
    rm = [{"ground_truth": stdio("A")}, {"ground_truth": stdio("B")}, {"ground_truth": stdio("A")}]
    info = [{"problem_id": "p", "question": "q"}] * 3
    assert code.code_reward([None] * 3, ["B", "B", "A"], rm, extra_info=info) == [0.0, 1.0, 1.0]
    # the same tests under another question are another problem too (HumanEval's prompt is the program's head)
    seen = []
    judge = code.verify_code
    monkeypatch.setattr(code, "verify_code", lambda p, c, *a, **k: seen.append(p.to_pylist()) or judge(p, c, *a, **k))
    info = [{"problem_id": "p", "question": q} for q in "ABA"]
    assert code.code_reward([None] * 3, ["A"] * 3, [{"ground_truth": stdio("A")}] * 3, extra_info=info) == [1.0] * 3
    assert [(p["problem_id"], p["question"]) for p in seen[0]] == [("p", "A"), ("p#1", "B")]


@pytest.mark.parametrize("truth", [
    "not json", stdio("A", time_limit_s=float("nan")), stdio("A", time_limit_s=float("inf")),
    stdio("A", time_limit_s=-1), "[" * 5000 + "]" * 5000, json.dumps({"kind": "stdio", "tests": []}),
])  # fmt: skip
def test_a_code_row_that_cannot_be_judged_is_that_rows_zero(monkeypatch, truth):
    """A bad spec (a NaN limit, deep nesting, no tests) scores 0 as invalid_problem; the batch goes on."""
    from bonforge.rewards import code

    monkeypatch.setattr(code, "shared_pool", lambda cfg: EchoPool())
    out = code.score_batch(["A", "A"], [truth, stdio("A")], [{"problem_id": "p"}, {"problem_id": "p"}])
    assert out[0]["status"] == "invalid_problem" and out[0]["score"] == 0.0 and "field 'tests'" in out[0]["error"]
    assert out[1]["score"] == 1.0


def test_a_huge_spec_time_limit_is_capped_to_the_recipe_bound():
    from bonforge.judging.spec import MAX_TIME_LIMIT_S, parse_spec
    from bonforge.sandbox.config import CodeVerifyConfig

    assert parse_spec(stdio("A", time_limit_s=1e300), "p").time_limit_s == MAX_TIME_LIMIT_S
    assert parse_spec(stdio("A", time_limit_s=10**400), "p").time_limit_s == MAX_TIME_LIMIT_S
    assert parse_spec(stdio("A", time_limit_s=2), "p").time_limit_s == 2.0
    assert CodeVerifyConfig.model_fields["time_limit_s"].metadata[-1].le == MAX_TIME_LIMIT_S
