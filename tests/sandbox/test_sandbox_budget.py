"""A candidate's time is bounded in advance: its budget (``judging.code_request.budget_s``), reruns of a check included;
a problem's own limit never raises the recipe's; dependent calls of a check are judged right within it."""

from __future__ import annotations

import json
import time

import pyarrow as pa

from bonforge.judging.code import verify_code
from bonforge.judging.code_request import budget_s
from bonforge.judging.spec import parse_spec
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.schema import CANDIDATES, PROBLEMS

from test_sandbox import judge

TEN = {"kind": "stdio", "tests": [{"input": f"{i}\n", "output": f"{i}\n"} for i in range(10)]}


def test_ten_slow_tests_end_within_the_candidates_budget(docker_pool):
    # 1 s limit, wall 3 s a test: 30 s for 10 hanging tests before; a 4 s budget ends it
    slow_after_3 = "import time\nn = int(input())\nif n >= 3:\n    time.sleep(60)\nprint(n)\n"
    start = time.monotonic()
    (verdict,) = judge(docker_pool, [slow_after_3], TEN, candidate_wall_s=4.0)
    took = time.monotonic() - start
    assert verdict["status"] == "timeout" and verdict["tests_passed"] == 3 and verdict["tests_total"] == 10, verdict
    assert took < 4.0 + 3.0, took  # the budget, plus the host's margins and the call's own work


def test_the_budget_formula():
    cfg = CodeVerifyConfig(time_limit_s=1.0, wall_factor=2.0, candidate_wall_s=20.0)
    assert budget_s(parse_spec(json.dumps(TEN), "p"), cfg) == 20.0  # 10 tests * 3 s, capped
    three = dict(TEN, tests=TEN["tests"][:3])
    assert budget_s(parse_spec(json.dumps(three), "p"), cfg) == 9.0
    check = {"kind": "assert", "entry_point": "f", "check": "assert f(1) == 2\n"}
    assert budget_s(parse_spec(json.dumps(check), "p"), cfg) == 20.0  # all runs of the check


def test_ten_and_more_dependent_calls_are_judged_right(docker_pool):
    for n in (10, 16):
        check = {"kind": "assert", "entry_point": "step",
                 "check": f"def check(c):\n    x = 0\n    for _ in range({n}):\n        x = c(x)\n    assert x == {n}\n"
                          "\ncheck(step)\n"}  # fmt: skip
        got = judge(docker_pool, ["def step(x):\n    return x + 1\n", "def step(x):\n    return x + 2\n"], check)
        assert [v["status"] for v in got] == ["passed", "wrong_answer"], (n, got)


def test_reruns_of_a_check_stop_at_the_budget(docker_pool):
    # each run takes 0.6 s; 30 dependent calls would need 30 runs (18 s): a 3 s budget ends them as timeout
    check = {"kind": "assert", "entry_point": "step",
             "check": "def check(c):\n    x = 0\n    for _ in range(30):\n        x = c(x)\n    assert x == 30\n\n"
                      "check(step)\n"}  # fmt: skip
    slow = "import time\ntime.sleep(0.6)\ndef step(x):\n    return x + 1\n"
    judge(docker_pool, ["def step(x):\n    return x\n"], dict(check, check="assert step(1) == 1\n"))  # checker up
    start = time.monotonic()
    (verdict,) = judge(docker_pool, [slow], check, candidate_wall_s=3.0)
    assert verdict["status"] == "timeout" and "budget" in verdict["detail"], verdict
    assert time.monotonic() - start < 3.0 + 4.0


def test_a_bad_time_limit_is_capped_by_the_recipes_and_never_loses_the_batch(docker_pool):
    cfg = docker_pool.cfg.model_copy(update={"extraction": "raw"})
    limits = {"nan": "NaN", "inf": "Infinity", "huge": "1e300", "tiny": "1e-300", "big": "50", "ok": "0.5"}
    rows = [{"problem_id": pid, "source": "t", "domain": "code", "question": "",
             "tests": '{"kind": "stdio", "time_limit_s": %s, "tests": [{"input": "", "output": "1\\n"}]}' % v}
            for pid, v in limits.items()]  # fmt: skip
    programs = ["print(1)\n", "while True:\n    pass\n"]
    cands = [{"candidate_id": f"{pid}/{i}", "problem_id": pid, "teacher": "t", "sample_index": i, "text": p}
             for pid in limits for i, p in enumerate(programs)]  # fmt: skip
    start = time.monotonic()
    out = verify_code(pa.Table.from_pylist(rows, schema=PROBLEMS), pa.Table.from_pylist(cands, schema=CANDIDATES),
                      cfg, pool=docker_pool).to_pylist()  # fmt: skip
    took = time.monotonic() - start
    by = {v["candidate_id"]: v["status"] for v in out}
    # a limit that is no number (NaN, infinity) is that problem's error (its candidates' sandbox_error, with
    # the reason); a huge one is capped; either way the other problems are judged
    unusable = ("nan", "inf")
    assert {pid: (by[f"{pid}/0"], by[f"{pid}/1"]) for pid in limits if pid != "tiny"} == {
        pid: ("sandbox_error",) * 2 if pid in unusable else ("passed", "timeout") for pid in limits if pid != "tiny"}
    assert all("time_limit_s" in v["detail"] for v in out if v["problem_id"] in unusable)
    assert by["tiny/1"] == "timeout"
    # every loop was stopped by the recipe's 1 s limit (wall 3 s), never by a problem's 50 s or infinity
    assert took < 6 * 3.0 + 5.0, took
