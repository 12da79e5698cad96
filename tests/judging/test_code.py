"""The output judge, the test spec and the verdict aggregation (no sandbox needed)."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bonforge.errors import DataError
from bonforge.sandbox import wire
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.judging.compare import tokens_match, value_matches
from bonforge.judging.spec import parse_spec
from bonforge.judging.code_verdict import judge_outcome


@pytest.mark.parametrize(
    ("got", "expected", "ok"),
    [
        ("1 2\n3\n", "1 2\n3\n", True),
        ("1   2\r\n3", "1 2\n3\n\n", True),  # spacing and line breaks do not matter
        ("1 2\n", "1 2\n3\n", False),  # a missing line fails
        ("1 2\n3\n4\n", "1 2\n3\n", False),  # an extra line fails
        ("", "0\n", False),
        ("", "", True),
        ("10", "010", True),  # integers compare by value
        ("10", "11", False),
        ("123456789012345678901234567890", "123456789012345678901234567891", False),  # exact, no float rounding
        ("0.3333333", "0.33333333", True),
        ("0.3334", "0.3333", False),
        ("1000000.5", "1000000.9", True),  # relative tolerance
        ("3", "3.0", True),  # a float expected: an integer within the tolerance matches
        ("3.0", "3", False),  # an integer expected: only that integer (digit strings, no tolerance)
        ("5.0000004", "5", False),
        ("5", "5.0000004", True),
        ("1e-7", "0", False),
        ("1e-7", "0.0", True),
        ("-0", "0", True),
        ("+007", "7", True),
        ("9" * 5000, "9" * 5000, True),  # past int()'s 4,300-digit limit: compared as digit strings
        ("9" * 4999 + "8", "9" * 5000, False),
        ("1" + "0" * 400, "1e400", True),  # beyond the float range: infinities of their sign
        ("-1e400", "1e400", False),
        ("\uff15", "5", False),  # only ASCII digits are numbers
        ("\u0665", "\u0665", True),  # ...a Unicode digit is a word, equal to itself
        ("5\u00a06", "5 6", False),  # only ASCII whitespace separates tokens
        ("1\r\n2\r\n", "1\n2\n", True),
        ("YES", "yes", False),
        ("nan", "nan", True),
        ("inf", "1e400", False),
    ],
)
def test_tokens_match(got, expected, ok):
    assert tokens_match(got, expected) is ok


def test_tokens_match_options():
    assert tokens_match("YES", "yes", case_insensitive=True)
    assert not tokens_match("0.31", "0.3")
    assert tokens_match("0.31", "0.3", tol=0.05)


@given(st.lists(st.integers(), min_size=1), st.integers(min_value=0))
def test_dropping_any_line_never_passes(values, drop):
    expected = "".join(f"{v}\n" for v in values)
    lines = expected.splitlines(True)
    del lines[drop % len(lines)]
    assert not tokens_match("".join(lines), expected)


@pytest.mark.parametrize(
    ("got", "expected", "ok"),
    [
        (9, 9, True),
        (9, [9], False),  # strict unless the format wraps values (APPS: below)
        ([1, 2], [1, 2], True),
        ([1, 2], [[1, 2]], False),
        (1, [1, 2], False),
        (True, 1, False),  # bools only equal bools
        (1, 1.0000000001, True),
        (5.0000004, 5, False),  # an integer expected: exact
        (3.0, 3, True),  # ...a float of exactly that value is equal (as Python's == says)
        (10**400, 1.5, False),  # an int beyond the float range: no OverflowError
        (10**400, 10**400, True),
        ({"a": [1.0]}, {"a": [1]}, True),
        ("a", "A", False),
        (None, None, True),
    ],
)
def test_value_matches(got, expected, ok):
    assert value_matches(got, expected) is ok


@pytest.mark.parametrize(("got", "expected", "ok"), [
    (9, [9], True),  # APPS wraps return values in a one-element list in some files
    (False, [False], True),
    ([1, 2], [[1, 2]], True),
    ([1, 2], [1, 2], True),
    (1, [1, 2], False),  # only a one-element list unwraps
    (1, [[1]], False),  # once
])  # fmt: skip
def test_value_matches_wrapped(got, expected, ok):
    assert value_matches(got, expected, wrapped=True) is ok


def test_spec_round_trip_and_errors():
    spec = parse_spec(json.dumps({"kind": "stdio", "tests": [{"input": "1", "output": "2"}]}), "p1")
    assert parse_spec(spec.to_json(), "p1") == spec
    with pytest.raises(DataError, match=r"problems, record p9, field 'tests': 'kind' must be one of"):
        parse_spec('{"kind": "exotic"}', "p9")
    with pytest.raises(DataError, match="record p9.*call spec needs 'fn_name'"):
        parse_spec(json.dumps({"kind": "call", "tests": [{"args": [], "output": 1}]}), "p9")
    with pytest.raises(DataError, match="test 0 needs an 'output'"):
        parse_spec(json.dumps({"kind": "stdio", "tests": [{"input": ""}]}), "p9")
    with pytest.raises(DataError, match="not valid JSON"):
        parse_spec("{", "p9")
    err = DataError("x", "problems", "p9", "tests")
    assert str(pickle.loads(pickle.dumps(err))) == str(err)


STDIO = parse_spec(json.dumps({"kind": "stdio", "tests": [{"input": "", "output": str(i)} for i in range(3)]}), "p")


def res(status="ok", stdout=""):
    return {"status": status, "stdout": stdout, "stderr": ""}


def test_judge_outcome_reward_and_first_failure():
    cfg = CodeVerifyConfig(backend="process")
    outcome = {"results": [res(stdout="0"), res(stdout="7"), res("timeout")]}
    status, passed, total, detail = judge_outcome(STDIO, outcome, cfg)
    assert (status, passed, total) == ("wrong_answer", 1, 3)
    assert detail.startswith("test 1: wrong_answer: expected '1', got '7'")
    assert judge_outcome(STDIO, {"results": [res(stdout=str(i)) for i in range(3)]}, cfg)[:3] == ("passed", 3, 3)
    # with stop_on_first_failure later passes do not count
    stop = cfg.model_copy(update={"stop_on_first_failure": True})
    assert judge_outcome(STDIO, {"results": [res(stdout="9"), res(stdout="1"), res(stdout="2")]}, stop)[:2] == (
        "wrong_answer", 0)  # fmt: skip
    # without it, every passing test counts toward the reward
    assert judge_outcome(STDIO, {"results": [res(stdout="9"), res(stdout="1"), res(stdout="2")]}, cfg)[:2] == (
        "wrong_answer", 2)  # fmt: skip


def test_sandbox_failure_is_not_a_candidate_failure():
    cfg = CodeVerifyConfig(backend="process")
    assert judge_outcome(STDIO, {"sandbox_error": "engine gone"}, cfg)[:3] == ("sandbox_error", 0, 3)
    assert judge_outcome(STDIO, {"runner_killed": "died 3 times"}, cfg)[0] == "runtime_error"


def test_config_fails_at_load():
    with pytest.raises(ValueError, match="time_limit_s"):
        CodeVerifyConfig(time_limit_s=-1)
    with pytest.raises(ValueError, match="extra_forbidden"):
        CodeVerifyConfig(tiem_limit_s=1)
    with pytest.raises(ValueError, match="image applies only to backend 'docker'"):
        CodeVerifyConfig(backend="process", image="x")
    assert CodeVerifyConfig(time_limit_s=2, wall_factor=3).wall_limit_s == 7


def test_a_long_chunk_does_not_hold_the_next_back():
    """Assert-style requests run in chunks, two at a time: when one chunk waits on a long program, the next
    chunk starts as soon as the other one ends (before: in order, so a loop in one chunk left the other worker
    idle until it ended: the whole CodeT pool at 56 % of its floor on an idle machine)."""
    import threading

    from bonforge.judging import code, passes

    n = 3 * passes.CHUNK
    third_started = threading.Event()

    def run(requests, on_outcome):
        first = requests[0]["i"]
        if first == 2 * passes.CHUNK:
            third_started.set()
        if first == 0:  # the long one: it ends only once the third chunk has started
            assert third_started.wait(10), "the third chunk waited for the first"
        return [on_outcome(k, {"sandbox_error": f"request {first + k}"}) for k in range(len(requests))]

    requests = [{"i": i, "time_limit": passes.PROBE_S} for i in range(n)]  # no probe: one pass
    kept = code._run_and_check(requests, [None] * n, dict.fromkeys(range(n), "check"), None, run, CodeVerifyConfig())
    assert [k["sandbox_error"] for k in kept] == [f"request {i}" for i in range(n)]


def test_checker_requests_group_outputs_by_size():
    """Outputs read by a checker go in requests of about ``CHECK_BYTES`` each: small (or empty) ones share one
    request, megabytes go one at a time, every test exactly once and in order."""
    from bonforge.judging import code_checkers as code

    mib = "x" * code.CHECK_BYTES
    results = [{"stdout": s} for s in ("", "", "1 2\n", mib, "", mib, mib + "y")]
    assert code.by_bytes([0, 1, 2], results) == [[0, 1, 2]]
    assert code.by_bytes(list(range(7)), results) == [[0, 1, 2], [3, 4], [5], [6]]
    assert code.by_bytes([], results) == []


def test_an_unfinished_test_says_nothing_of_the_candidate():
    """A test the machine kept from finishing (``unfinished``, still so when run again alone) gives no label:
    ``infra_error``, reward 0, unless another test failed (what that failure says is known)."""
    cfg = CodeVerifyConfig(backend="process")
    unfinished = dict(res("unfinished"), error="not finished: the machine was too busy")
    status, passed, _, detail = judge_outcome(STDIO, {"results": [res(stdout="0"), unfinished, res(stdout="2")]}, cfg)
    assert (status, passed) == ("infra_error", 2) and "too busy" in detail
    assert judge_outcome(STDIO, {"results": [res(stdout="0"), unfinished, res(stdout="9")]}, cfg)[0] == "wrong_answer"
    assert judge_outcome(STDIO, {"results": [res("timeout"), unfinished, res(stdout="2")]}, cfg)[0] == "timeout"


def test_an_unfinished_run_runs_again_alone_at_the_end_each_time_allowed_to_wait_longer():
    """A request with an unfinished test runs again after every other request, alone (a batch of one), each run
    alone with a larger stretch (``wire.rerun_stretches``: 40, 160, then the one that gives a test 600 s); its
    verdict is that of its last run: passed once one finishes, infra_error when the last one does not. The
    first pass keeps ``LOAD_STRETCH`` (no stretch in the request)."""
    from bonforge.judging import code, passes

    cfg = CodeVerifyConfig(backend="process")
    batches = []
    alone = {0: [[res(stdout=str(i)) for i in range(3)]], 2: [[res("unfinished")] * 3] * 3,
             3: [[res("unfinished")] * 3, [res(stdout=str(i)) for i in range(3)]]}
    runs = {i: [res("unfinished")] * 3 for i in (0, 2, 3)} | {1: [res(stdout=str(i)) for i in range(3)]}

    def run(requests, on_outcome):
        batches.append([(r["i"], r.get("stretch")) for r in requests])
        out = [runs[r["i"]] if len(batches) == 1 else alone[r["i"]].pop(0) for r in requests]
        return [on_outcome(k, {"results": [dict(x) for x in o]}) for k, o in enumerate(out)]

    requests = [{"i": i, "time_limit": passes.PROBE_S, "wall_limit": 3.0, "tests": [{}] * 3}
                for i in range(4)]  # no probe  # fmt: skip
    kept = code._run_and_check(requests, [STDIO] * 4, {}, None, run, cfg)
    assert batches == [[(0, None), (1, None), (2, None), (3, None)], [(0, 40.0)], [(2, 40.0)], [(2, 160.0)],
                       [(2, 200.0)], [(3, 40.0)], [(3, 160.0)]]  # fmt: skip
    assert [code.verdict(STDIO, k, cfg)[0] for k in kept] == ["passed", "passed", "infra_error", "passed"]


def test_no_label_verdicts_have_no_reward(monkeypatch):
    """``verify_code`` gives a verdict without a label (schema.NO_LABEL) reward 0 whatever its tests passed."""
    from bonforge.judging import code, passes
    from code_shapes import one_problem

    class Pool:
        def run(self, requests):
            return [{"results": [res(stdout="0"), dict(res("unfinished"), error="busy")]} for _ in requests]

    problems, cands = one_problem({"kind": "stdio", "tests": [{"input": "", "output": "0"},
                                                              {"input": "", "output": "1"}]}, ["print(0)"])
    monkeypatch.setattr(passes, "PROBE_S", 100.0)  # one pass
    (row,) = code.verify_code(problems, cands, CodeVerifyConfig(backend="process", extraction="raw"),
                              pool=Pool()).to_pylist()
    assert (row["status"], row["tests_passed"], row["reward"], row["correct"]) == ("infra_error", 1, 0.0, False)


def test_every_wall_limit_is_the_one_formula(monkeypatch):
    """A test's, a build's, a checker's and the control program's wall limits all come from
    ``wire.wall_limit`` (``Limits``): a changed formula changes them all."""
    from bonforge.judging.code_request import build_request
    from bonforge.sandbox import testlib, wire
    from bonforge.sandbox.pool import SandboxPool

    cfg = CodeVerifyConfig(backend="process", time_limit_s=2.0, wall_factor=3.0, build_time_limit_s=5.0)
    spec = parse_spec(json.dumps({"kind": "stdio", "tests": [{"input": "", "output": "1"}]}), "p")
    native = build_request(spec, "int main(){}", cfg, "r", language="cpp")
    checker = testlib.build_request({"source": "x"}, cfg)
    walls = [native["wall_limit"], native["build"]["wall_limit"], checker["wall_limit"], checker["build"]["wall_limit"],
             SandboxPool(cfg).control_request().wall_limit, cfg.wall_limit_s]
    assert walls == [7.0, 16.0, testlib.CHECK_TIME_S * 3 + 1, testlib.BUILD_TIME_S * 3 + 1, 7.0, 7.0]
    monkeypatch.setattr(wire.wall_limit, "__defaults__", (0.0,))  # no slack
    assert build_request(spec, "int main(){}", cfg, "r", language="cpp")["wall_limit"] == 6.0
    assert cfg.wall_limit_s == 6.0


ASSERT = parse_spec(json.dumps({"kind": "assert", "entry_point": "f", "check": "assert f(1) == 2\n"}), "a")


class Replays:
    """A check host that answers each replay with the next of ``answers`` (and records the requests' plans)."""

    def __init__(self, answers):
        self.answers, self.seen = list(answers), []

    def replay(self, key, plan, calls, end, time_limit, go_on):
        self.seen.append(plan)
        return dict(self.answers.pop(0))


def assert_runs(outcomes, answers, budget=1.0):
    """One assert-style request run and replayed: each run's result the next of ``outcomes`` (kind, wall,
    wait); the runs' batches, the requests run and the verdict."""
    from bonforge.judging import code, passes

    cfg = CodeVerifyConfig(backend="process")
    batches, sent = [], []

    def run(requests, on_outcome):
        batches.append(len(requests))
        sent.extend(requests)
        out = []
        for k, _ in enumerate(requests):
            status, wall, wait = outcomes.pop(0)
            result = {"status": status, "stdout": "", "stderr": "", "error": "", "wall_s": wall, "wait_s": wait,
                      "calls": ["v 2"]}  # fmt: skip
            out.append(on_outcome(k, {"results": [result]}))
        return out

    request = {"id": "r", "kind": "assert", "time_limit": passes.PROBE_S, "wall_limit": 3.0, "budget": budget,
               "tests": [{"calls": []}]}
    host = Replays(answers)
    (kept,) = code._run_and_check([request], [ASSERT], {0: "key"}, host, run, cfg)
    return batches, sent, code.verdict(ASSERT, kept, cfg)


def test_an_assert_style_budget_counts_the_programs_own_time():
    """A check whose calls depend on the answers runs the program again in what is left of its budget, counted
    in the program's own time: a first run of 1.2 s of wall, 1.1 s of it waiting for a CPU (a busy machine),
    leaves 0.9 s of a 1 s budget (before: the wall counted, the budget ran out: ``timeout``)."""
    more = {"more": [[[1], {}], [[2], {}]], "go_on": False}
    batches, sent, verdict = assert_runs([("ok", 1.2, 1.1), ("ok", 0.2, 0.0)], [more, {"status": "passed"}])
    assert verdict[0] == "passed", verdict
    assert sent[1]["budget"] == pytest.approx(0.9)
    # control: the program's own 1.2 s spends the whole budget
    _, _, verdict = assert_runs([("ok", 1.2, 0.0)], [more])
    assert verdict[0] == "timeout" and "budget" in verdict[3], verdict


def test_an_assert_style_replay_the_machine_kept_from_finishing_runs_again_alone():
    """A replay the check host could not finish (``unfinished``: the machine was too busy, ``check_host``)
    says nothing of the program: its run runs again alone after the others, judged there; still unfinished,
    ``infra_error`` (no label), never ``timeout``. That run's time is not charged to the budget."""
    late = {"status": "unfinished", "error": "the check did not finish: the machine was too busy"}
    batches, sent, verdict = assert_runs([("ok", 0.6, 0.0)] * 2, [late, {"status": "passed"}])
    assert (batches, verdict[0]) == ([1, 1], "passed"), (batches, verdict)
    assert sent[1]["budget"] == 1.0
    alone = len(wire.rerun_stretches(3.0))  # each run alone allowed to wait longer, then no label
    batches, sent, verdict = assert_runs([("ok", 0.6, 0.0)] * (1 + alone), [late] * (1 + alone))
    assert (batches, verdict[0]) == ([1] * (1 + alone), "infra_error"), (batches, verdict)
    assert [r.get("stretch") for r in sent] == [None, *wire.rerun_stretches(3.0)]
    assert "too busy" in verdict[3]
