"""The code judge's passes (``judging.passes``, run by ``judging.code._run_and_check``): a short first pass under
each request's probe, the requests that ran into it again with their own limits at the end; verdicts those of
one pass."""

from __future__ import annotations

import json

import pytest

from code_shapes import one_problem

from bonforge.judging import code, passes
from bonforge.judging.code import build_request, verify_code
from bonforge.judging.spec import parse_spec
from bonforge.sandbox.config import CodeVerifyConfig

THREE = {"kind": "stdio", "tests": [{"input": f"{i}\n", "output": f"{i}\n"} for i in range(3)]}
# a program's CPU seconds per test; None: it prints a wrong answer at once
COSTS = {
    "fast": [0.01, 0.01, 0.01],
    "wrong": [0.01, None, 0.01],
    "slow": [0.01, 0.6, 0.01],  # over the probe, under the limit: passed
    "loop": [0.01, 0.01, float("inf")],  # its last test never ends: timeout
    "slow then wrong": [0.6, None, 0.01],
}


class CostPool:
    """A pool whose programs take the CPU seconds of ``COSTS`` (keyed by the program's text): a test over the
    request's limit is a timeout. It records each run's (program, CPU limit, wall limit)."""

    def __init__(self):
        self.log: list[tuple[str, float, float]] = []

    def run(self, requests: list[dict]) -> list[dict]:
        return [self._one(r) for r in requests]

    def _one(self, request: dict) -> dict:
        program = request["program"].strip()
        self.log.append((program, request["time_limit"], request["wall_limit"]))
        results = []
        for i, cost in enumerate(COSTS[program]):
            if cost is not None and cost > request["time_limit"]:
                res = {"status": "timeout", "stdout": "", "cpu_s": request["time_limit"],
                       "wall_s": request["wall_limit"]}  # fmt: skip
            else:
                res = {"status": "ok", "stdout": f"{i if cost is not None else -1}\n", "cpu_s": cost or 0.01,
                       "wall_s": (cost or 0.01) + 0.01}  # fmt: skip
            results.append(dict(res, stderr="", error=""))
            if res["status"] != "ok" and (request["stop_on_failure"] or request.get("stop_on_timeout")):
                break  # (every failure here is a timeout)
        return {"id": request["id"], "results": results, "latency_s": sum(r["wall_s"] for r in results)}


def judge(programs: list[str], pool=None, **cfg) -> tuple[list[dict], list[tuple[str, float, float]]]:
    """The verdicts of ``programs`` for one problem of ``THREE`` (on ``pool``, default a ``CostPool``) and the
    cost pool's log."""
    problems, cands = one_problem(THREE, programs)
    pool = pool or CostPool()
    config = getattr(pool, "cfg", CodeVerifyConfig()).model_copy(update={"extraction": "raw", **cfg})
    out = verify_code(problems, cands, config, pool=pool)
    return [{k: v[k] for k in ("status", "tests_passed", "detail", "latency_ms")} for v in out.to_pylist()], getattr(
        pool, "log", []
    )


@pytest.mark.parametrize("stop", [False, True])
def test_the_long_requests_run_again_at_the_end_with_their_own_limits(monkeypatch, stop):
    programs = list(COSTS)
    verdicts, log = judge(programs, stop_on_first_failure=stop)
    probe_wall = passes.PROBE_S * 2.0 + passes.PROBE_SLACK_S
    # first every program under the probe, in order; then the three that ran into it, with the 3 s limit
    assert log == [(p, passes.PROBE_S, probe_wall) for p in programs] + [
        (p, 3.0, 7.0) for p in ("slow", "loop", "slow then wrong")
    ]
    assert [v["status"] for v in verdicts] == ["passed", "wrong_answer", "passed", "timeout", "wrong_answer"]
    monkeypatch.setattr(passes, "PROBE_S", 100.0)  # no probe: one pass with the requests' own limits
    one_pass, log = judge(programs, stop_on_first_failure=stop)
    assert log == [(p, 3.0, 7.0) for p in programs]
    assert verdicts == one_pass  # statuses, tests passed, details and the latency of the run kept


def test_a_short_limit_or_a_built_program_runs_once():
    spec = parse_spec(json.dumps(THREE), "p")
    cfg = CodeVerifyConfig()
    first = passes.probe(build_request(spec, "print(1)", cfg, "r"), cfg)
    assert (first["time_limit"], first["stop_on_timeout"]) == (passes.PROBE_S, True)
    short = parse_spec(json.dumps(dict(THREE, time_limit_s=passes.PROBE_S)), "p")
    assert passes.probe(build_request(short, "print(1)", cfg, "r"), cfg) is None
    for language in ("cpp", "java", "pypy"):  # a second run would build the program again
        assert passes.probe(build_request(spec, "int main(){}", cfg, "r", language=language), cfg) is None


class Rounds:
    """A checker whose check asks for a second call once the first answered (a check whose calls depend on the
    program's answers), then accepts."""

    def replay(self, key, plan, calls, end, time_limit, go_on):
        if end["status"] != "ok":
            return {"status": end["status"], "error": end["error"]}
        if plan is not None:  # None: the check's first plan (one call)
            return {"status": "passed"}
        return {"more": [[[1], {}], [[2], {}]], "go_on": False}


def test_an_assert_style_check_counts_only_its_runs_with_their_own_limits():
    """A check replayed round after round: the probe that ran out of time is not a round, and its time is not
    taken from the candidate's budget (the rounds' budgets and the verdict's time are those of one pass)."""
    budgets: list[tuple[float, float]] = []

    def run(requests, on_outcome):
        out = []
        for k, r in enumerate(requests):
            budgets.append((r["time_limit"], r["budget"]))
            calls = r["tests"][0]["calls"]
            cpu = 0.4 * len(calls)  # over the probe from the first round
            status = "timeout" if cpu > r["time_limit"] else "ok"
            res = {"status": status, "error": "", "stdout": "", "stderr": "", "cpu_s": cpu,
                   "wall_s": min(cpu, r["wall_limit"]), "calls": ["v 1"] * len(calls)}  # fmt: skip
            out.append(on_outcome(k, {"id": r["id"], "results": [res], "latency_s": res["wall_s"]}))
        return out

    cfg = CodeVerifyConfig(candidate_wall_s=20.0)
    spec = parse_spec(json.dumps({"kind": "assert", "entry_point": "f", "check": "assert f(1) == 1\n"}), "p")
    request = build_request(spec, "def f(x):\n    return 1\n", cfg, "r", plan=[[[1], {}]])
    kept = code._run_and_check([request], [spec], {0: "check"}, Rounds(), run, cfg)
    assert budgets == [(passes.PROBE_S, 20.0), (3.0, 20.0), (3.0, 20.0 - 0.4)]
    assert kept[0]["results"][0]["status"] == "passed"
    assert kept[0]["results"][0]["wall_s"] == pytest.approx(0.4 + 0.8)  # its two rounds, not the probe


SLOW_SECOND = (  # 0.2 CPU-s on its second test
    "import time\nn = int(input())\nt = time.process_time()\n"
    "while n == 1 and time.process_time() - t < 0.2:\n    pass\nprint(n)\n"
)


@pytest.mark.docker
def test_real_programs_get_the_verdicts_of_one_pass(docker_pool, monkeypatch):
    """A loop, a program that takes 0.2 CPU-s on one test (over the probe, under the 1 s limit), fast right,
    wrong and failing ones: the same verdicts with the probe as in one pass."""
    programs = [
        "while True:\n    pass\n",
        SLOW_SECOND,
        "print(input())\n",
        "print(-1)\n",
        "raise ValueError(input())\n",
        "import time\nn = int(input())\ntime.sleep(3.5 if n == 2 else 0)\nprint(n)\n",  # over the probe's wall limit
    ]
    expected = [("timeout", 0), ("passed", 3), ("passed", 3), ("wrong_answer", 0), ("runtime_error", 0), ("passed", 3)]
    slack = {"wall_factor": 10.0}  # wall limits 11 s, the probe's 1.5 s: CPU limits decide on a busy machine
    verdicts, _ = judge(programs, docker_pool, **slack)
    assert [(v["status"], v["tests_passed"]) for v in verdicts] == expected
    monkeypatch.setattr(passes, "PROBE_S", 100.0)  # one pass with the requests' own limits
    one_pass, _ = judge(programs, docker_pool, **slack)
    assert [(v["status"], v["tests_passed"], v["detail"]) for v in verdicts] == [
        (v["status"], v["tests_passed"], v["detail"]) for v in one_pass
    ]


@pytest.mark.docker
def test_a_probe_ends_at_its_first_test_out_of_time(docker_pool):
    spec = parse_spec(json.dumps(THREE), "p")
    request = passes.probe(build_request(spec, SLOW_SECOND, docker_pool.cfg, "r"), docker_pool.cfg)
    (outcome,) = docker_pool.run([request])
    assert [r["status"] for r in outcome["results"]] == ["ok", "timeout"]  # the third test never ran
