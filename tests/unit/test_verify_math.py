import time

import pyarrow as pa
import pytest

from bonforge.config import MathVerifyConfig
from bonforge.tasks.verify_math import HardTimeoutChecker, extract_answer, gold_answer, last_boxed, verify_math

CFG = MathVerifyConfig()


@pytest.mark.parametrize("text, expected", [
    (r"so \boxed{\frac{1}{2}} and later \boxed{3}", "3"),
    (r"\boxed{\sqrt{x^{2}}}", r"\sqrt{x^{2}}"),
    ("work...\nA: 1,234.", "1234"),
    ("work\n#### 72", "72"),
    ("she pays $5 then $12", "12"),
    ("no digits at all", None),
    ("", None),
])
def test_extract_answer(text, expected):
    assert extract_answer(text, CFG) == expected


def test_extraction_options():
    assert extract_answer("the answer is 7", MathVerifyConfig(last_number=False)) is None
    assert extract_answer("Final: 9 apples", MathVerifyConfig(patterns=[r"Final:\s*(\d+)"])) == "9"
    assert last_boxed(r"\boxed{unclosed") is None


def test_gold_answer_from_worked_solution_or_plain():
    assert gold_answer("steps\n#### 18", CFG) == "18"
    assert gold_answer(r"\frac{3}{4}", CFG) == r"\frac{3}{4}"


def _cands(rows):
    return pa.table({
        "candidate_id": [f"p/{i}" for i in range(len(rows))], "problem_id": ["p"] * len(rows),
        "teacher": ["t"] * len(rows), "text": rows,
    })


def test_verdicts_classes_and_rewards():
    problems = pa.table({"problem_id": ["p"], "answer": ["#### 0.5"]})
    out = verify_math(_cands([r"\boxed{\frac{1}{2}}", "A: 3", "nothing here"]), problems, CFG).to_pylist()
    assert [r["status"] for r in out] == ["correct", "wrong_answer", "no_answer"]
    assert [r["reward"] for r in out] == [1.0, 0.0, 0.0]
    assert out[0]["extracted"] == r"\frac{1}{2}"


def test_pathological_power_tower_times_out_and_the_stage_goes_on():
    tower = r"\boxed{2^{2^{2^{2^{2^{2^{2^{2^{2^{2}}}}}}}}}}"
    problems = pa.table({"problem_id": ["p"], "answer": ["#### 4"]})
    t0 = time.perf_counter()
    out = verify_math(_cands(["A: 4", tower, "A: 4"]), problems, MathVerifyConfig(timeout_s=2)).to_pylist()
    assert [r["status"] for r in out] == ["correct", "timeout", "correct"]
    assert out[1]["reward"] == 0.0 and "2 s" in out[1]["detail"]
    assert time.perf_counter() - t0 < 30


def test_checker_restarts_after_a_kill():
    c = HardTimeoutChecker()
    try:
        res = c.check([(0, "2", r"2^{2^{2^{2^{2^{2^{2^{2^{2}}}}}}}}"), (1, "3", "3")], timeout_s=1.5)
        assert res[0][0] == "timeout" and res[1][0] == "correct"
        assert c.check([(5, "1/2", "0.5")], timeout_s=5)[5][0] == "correct"
    finally:
        c.close()
