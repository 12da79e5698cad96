import json
import multiprocessing
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from math_verify import parse, verify

from bonforge.config import MathVerifyConfig
from bonforge.judging import math as vm
from bonforge.judging.math import HardTimeoutChecker, check_answer, verify_math

from math_pairs import PAIRS

TOWER = r"\boxed{2^{2^{2^{2^{2^{2^{2^{2^{2^{2}}}}}}}}}}"


def _cands(rows, pids=None):
    return pa.table({
        "candidate_id": [f"c{i}" for i in range(len(rows))], "problem_id": pids or ["p"] * len(rows),
        "teacher": ["t"] * len(rows), "text": rows,
    })


@pytest.fixture(scope="module")
def pair_verdicts():
    """The verdicts stage on the whole labelled set, one problem per pair."""
    pids = [f"p{i}" for i in range(len(PAIRS))]
    problems = pa.table({"problem_id": pids, "answer": [gold for _, _, gold, _ in PAIRS]})
    return verify_math(_cands([text for _, text, _, _ in PAIRS], pids), problems, MathVerifyConfig()).to_pylist()


@pytest.mark.parametrize("i", range(len(PAIRS)), ids=[f"{p[0]}-{i}" for i, p in enumerate(PAIRS)])
def test_answer_families(pair_verdicts, i):
    family, text, gold, label = PAIRS[i]
    row = pair_verdicts[i]
    assert row["correct"] is label, (text, gold, row["extracted"], row["status"], row["detail"])
    assert row["status"] in (("correct",) if label else ("wrong_answer", "no_answer"))


def test_every_pair_math_verify_gets_right_we_get_right_too(pair_verdicts):
    """math-verify alone (gold read as plain text or in $...$, whichever it judges right) against ours."""
    def mv_alone(text, gold):
        return verify(parse(gold), parse(text)) or verify(parse(gold if "$" in gold else f"${gold}$"), parse(text))

    mv_right = {i for i, (_, text, gold, label) in enumerate(PAIRS) if mv_alone(text, gold) is label}
    ours_right = {i for i, (*_, label) in enumerate(PAIRS) if pair_verdicts[i]["correct"] is label}
    assert mv_right - ours_right == set()
    assert len(ours_right) > len(mv_right)  # regex-free extraction and gold reading win where it misses


def test_extracted_is_math_verify_string_form_and_no_answer_says_why():
    problems = pa.table({"problem_id": ["p"], "answer": ["5"]})
    texts = [r"so $\frac{10}{9}$", r"is $[0,1)$", "", "no idea", r"\alpha answer:5", "answer:5"]
    rows = verify_math(_cands(texts), problems, MathVerifyConfig()).to_pylist()
    assert [r["extracted"] for r in rows] == [r"\frac{10}{9}", "[0,1)", None, None, None, "5"]
    assert [r["status"] for r in rows] == ["wrong_answer", "wrong_answer", "no_answer", "no_answer", "no_answer",
                                           "correct"]
    assert rows[2]["detail"] == "empty text"
    assert rows[3]["detail"] == "math-verify found no answer in the text"
    assert "last-number fallback skips texts with LaTeX" in rows[4]["detail"]
    with_pattern = check_answer("no idea", "5", MathVerifyConfig(patterns=[r"^A:\s*(.+)$"]))
    assert with_pattern.detail == "no recipe pattern matched and math-verify found no answer in the text"
    assert check_answer("answer:5", "5", MathVerifyConfig(last_number=False)).status == "no_answer"


def test_recipe_pattern_wins_over_boxes_and_gold_markers():
    gsm = MathVerifyConfig(patterns=[r"(?m)^A:\s*(.+?)\s*$"])
    assert check_answer("A: 7\nso \\boxed{5}", "7", gsm).correct
    assert check_answer("A: 7\nso \\boxed{5}", "7").extracted == "5"  # no pattern: the box
    assert check_answer("Work.\nA: $1,234.", "steps\nA: 1234", gsm).correct
    assert check_answer("A: 2,5", "A: 2.5", gsm).correct  # the captured value read by math-verify's rules


def test_settings_change_verdicts_and_enter_the_stage_key():
    base = MathVerifyConfig()
    cases = [
        (MathVerifyConfig(float_rounding=2), "The answer is 3.14", "3.14159"),
        (MathVerifyConfig(strict=False), "$y+1$", "x+1"),
        (MathVerifyConfig(allow_set_relation_comp=True), "$1 < x < 2$", "(1,2)"),
        (MathVerifyConfig(boxed_match_priority=-1), r"\boxed{4} The final answer is 5", "5"),
    ]
    for cfg, text, gold in cases:
        assert not check_answer(text, gold, base).correct and check_answer(text, gold, cfg).correct, cfg
        assert cfg.key_config() != base.key_config()
    assert base.key_config() == MathVerifyConfig(timeout_s=60, workers=7).key_config()


def test_multiple_choice_letters():
    mc = MathVerifyConfig(choices=["A", "B", "C", "D"])
    assert check_answer("The answer is B.", "B", mc).correct
    assert check_answer("The answer is C.", "B", mc).status == "wrong_answer"
    res = check_answer("I would say 42", "B", mc)
    assert res.status == "no_answer" and "choice letter" in res.detail
    with pytest.raises(ValueError, match="distinct"):
        MathVerifyConfig(choices=["A", "A"])


def test_missing_gold_and_unreadable_gold():
    problems = pa.table({"problem_id": ["p"], "answer": pa.array([None], pa.string())})
    row = verify_math(_cands(["A: 3"]), problems, MathVerifyConfig()).to_pylist()[0]
    assert (row["status"], row["detail"]) == ("error", "problem p has no gold answer")
    assert check_answer("3", "").status == "error"


def test_pathological_power_tower_times_out_and_the_stage_goes_on():
    problems = pa.table({"problem_id": ["p"], "answer": ["#### 4"]})
    t0 = time.perf_counter()
    out = verify_math(_cands(["A: 4", TOWER, "A: 4"]), problems, MathVerifyConfig(timeout_s=2)).to_pylist()
    assert [r["status"] for r in out] == ["correct", "timeout", "correct"]
    assert out[1]["reward"] == 0.0 and "2 s" in out[1]["detail"]
    assert time.perf_counter() - t0 < 30


def test_checker_restarts_after_a_kill():
    c, cfg = HardTimeoutChecker(), MathVerifyConfig()
    try:
        res = c.check(cfg, [(0, TOWER, "2"), (1, "3", "3")], timeout_s=1.5)
        assert res[0].status == "timeout" and res[1].status == "correct"
        assert c.check(cfg, [(5, "0.5", "1/2")], timeout_s=5)[5].correct
    finally:
        c.close()


def test_check_answer_from_threads_reuses_its_processes():
    """Threads (where SIGALRM cannot work) each borrow a checker; a timeout in one thread leaves the others'
    verdicts alone; afterwards the same processes serve new calls (none is spawned per call)."""
    results: dict[int, str] = {}

    def work(i: int) -> None:
        text, gold, timeout = (TOWER, "4", 1.5) if i == 0 else (f"The answer is {i}", str(i + i % 2), 10)
        results[i] = check_answer(text, gold, timeout=timeout).status

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {0: "timeout", 1: "wrong_answer", 2: "correct"}
    # the checker killed at the timeout starts again on its next call: serve one call on every idle
    # checker first, then no call may start a process
    for c in list(vm._CHECKERS._idle):
        c.check(MathVerifyConfig(), [(0, "1", "1")], 10)
    pids = sorted(c._proc.pid for c in vm._CHECKERS._idle if c._proc is not None)
    assert len(pids) == len(vm._CHECKERS._idle)
    for _ in range(3):
        assert check_answer("$\\frac{1}{2}$", "0.5").correct
    assert sorted(c._proc.pid for c in vm._CHECKERS._idle if c._proc is not None) == pids


def _in_forked_child(_):
    return check_answer("so 7", "7").status


def test_check_answer_in_a_forked_worker_process():
    check_answer("1", "1")  # this process holds a checker now; the fork must not use it
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.map(_in_forked_child, [0]) == ["correct"]
    assert check_answer("2", "2").correct


def test_a_problems_candidates_with_the_same_answer_are_verified_once(monkeypatch):
    """In the checker, a repeated (gold, settings, parsed answer) reuses the first verdict; any other
    difference (another answer, gold or setting) is verified afresh."""
    import math_verify

    calls = []
    real = math_verify.verify
    monkeypatch.setattr(math_verify, "verify", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    cfg, loose = MathVerifyConfig().model_dump_json(), MathVerifyConfig(float_rounding=2).model_dump_json()
    verdicts = [vm.judge(text, gold, c)[0] for text, gold, c in [
        ("A: 18", "#### 18", cfg), ("so \\boxed{18}", "#### 18", cfg), ("It is 18.", "#### 18", cfg),
        ("A: 17", "#### 18", cfg), ("A: 18", "#### 17", cfg), ("A: 18", "#### 18", loose), ("A: 18.0", "#### 18", cfg),
    ]]
    assert verdicts == ["correct"] * 3 + ["wrong_answer"] * 2 + ["correct"] * 2
    assert len(calls) == 5  # 18 once for the first three texts; 17, the other gold, the other setting, 18.0



_TWO_STAGE = r"""
import json, sys
from antlr4.atn.ParserATNSimulator import ParserATNSimulator
from latex2sympy2_extended.latex2sympy2 import latex2sympy
from sympy import srepr
from bonforge.judging.math import _sll_first

full_context = []
plain = ParserATNSimulator.execATNWithFullContext
ParserATNSimulator.execATNWithFullContext = lambda self, *a: full_context.append(1) or plain(self, *a)


def trees(forms):
    out = []
    for form in forms:
        try:
            out.append(srepr(latex2sympy(form, normalization_config=None)))
        except Exception:
            out.append(None)
    return out


sll_forms, others = json.loads(sys.argv[1])
ll = trees(sll_forms + others)
ll_full = len(full_context)
_sll_first()
_sll_first()  # a second call changes nothing
del full_context[:]
two_stage = trees(sll_forms)
print(json.dumps({"ll_full": ll_full, "sll_full": len(full_context), "same": ll == two_stage + trees(others),
                  "ll": ll}))
"""


def test_checker_parses_latex_sll_first_with_the_same_trees():
    """The checker child's LaTeX parser predicts with SLL first: no full-context (LL) prediction for the
    forms SLL reads, LL's tree where SLL reports a syntax error (powers such as ``3R^2``), the same trees
    as LL for every form, and a syntax error stays one. Run in a fresh interpreter: this process's parser
    stays math-verify's own, which other tests compare against."""
    sll_forms = [r"y=2x+1", r"(-\infty,3]", r"\{1,2\}", r"\sqrt{3}+2i", r"\frac{1}{2}"]
    others = [r"x^2-4x+4", "3R^2", r"\frac{1}{"]
    root = str(Path(vm.__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", _TWO_STAGE, json.dumps([sll_forms, others])], capture_output=True,
                         text=True, cwd=root, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["same"] and got["ll_full"] > 0 and got["sll_full"] == 0
    assert None not in got["ll"][:-1] and got["ll"][-1] is None


def test_a_text_cut_inside_a_code_block_states_no_answer_there():
    """A trajectory cut at its token limit inside a block it never ran: the last number of its code (the gold
    9 of ``range(9)``) was read as the answer, under the default last-number fallback and math-verify's own
    reading of ``answer = 9`` alike. Controls: the answer stated before the open block, and a closed block
    followed by the stated answer, are read as before."""
    cut = "Let me count with code.\n```python\ncount = 0\nfor k in range(9):\n"
    assert check_answer(cut, "9").status == "no_answer"
    assert check_answer("We try it.\n```python\nanswer = 9\n", "9").status == "no_answer"
    assert check_answer("~~~\n$x = 9$", "9").status == "no_answer"  # any fence, any tag
    assert check_answer("So the answer is $\\boxed{9}$.\n```python\nfor k in range(3):\n", "9").correct
    closed = "```python\nprint(3 ** 2)\n```\n```output\n9\n```\nThe answer is 9."
    assert check_answer(closed, "9").correct
    assert check_answer(closed.replace("is 9", "is 8"), "9").status == "wrong_answer"
