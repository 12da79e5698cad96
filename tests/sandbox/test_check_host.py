"""The host's check server: planning a check's calls, replaying it on a program's answers."""

from __future__ import annotations

import json
import os

import pytest

from bonforge.sandbox.check_host import CheckHost
from bonforge.sandbox.codec import decode_value, encode_value

CHECK = ("def check(c):\n    assert c(2, 3) == 5\n    for i in range(3):\n        assert c(i, i) == 2 * i\n\n"
         "check(add)\n")


def v(value) -> str:
    return "v " + json.dumps(encode_value(value))


def x(name: str, msg: str = "") -> str:
    return "x " + json.dumps([name, msg])


@pytest.fixture(scope="module")
def checker():
    with CheckHost(512) as c:
        yield c


KEYS = {}  # a name used in these tests -> the checker's key of the check last planned under it


def plan(checker, name, context, check, entry):
    answer = checker.plan(context, check, entry)
    KEYS[name] = answer["key"]
    return answer


def replay(checker, calls, status="ok", plan=None, go_on=False, key="add"):
    return checker.replay(KEYS[key], plan, calls, {"status": status, "error": f"it {status}"}, 2.0, go_on)


def test_plan_and_replay(checker):
    calls = plan(checker, "add", "", CHECK, "add")["plan"]
    assert [[decode_value(a) for a in args] for args, _ in calls] == [[2, 3], [0, 0], [1, 1], [2, 2]]
    right = [v(5), v(0), v(2), v(4)]
    assert replay(checker, right) == {"status": "passed"}
    assert replay(checker, [v(5), v(1), v(2), v(4)])["status"] == "wrong_answer"
    assert replay(checker, [v(5.0), v(0), v(2), v(4)]) == {"status": "passed"}  # 5.0 == 5, as in Python
    assert replay(checker, [v("5"), v(0), v(2), v(4)])["status"] == "wrong_answer"
    # answers the check never got: the run's own status, or a runtime error if it claimed to be done
    assert replay(checker, right[:2], status="timeout") == {"status": "timeout", "error": "it timeout"}
    assert replay(checker, right[:2])["status"] == "runtime_error"
    assert replay(checker, [x("ZeroDivisionError", "division by zero")])["error"].startswith("ZeroDivisionError")
    assert replay(checker, [x("SystemExit")])["status"] == "runtime_error"
    assert replay(checker, ["v [[[[", "v {}"])["status"] == "wrong_answer"  # unreadable: opaque, equal to nothing


def test_a_check_that_catches_runs_again_going_on(checker):
    check = "def check(c):\n    try:\n        c(-1)\n    except ValueError:\n        pass\n    else:\n" \
            "        assert False\n    assert c(4) == 2\n\ncheck(root)\n"  # fmt: skip
    plan(checker, "root", "", check, "root")
    more = replay(checker, [x("ValueError")], key="root")  # the child stopped at the exception
    assert more["go_on"] is True and len(more["more"]) == 2
    final = replay(checker, [x("ValueError"), v(2)], plan=more["more"], go_on=True, key="root")
    assert final == {"status": "passed"}


def test_context_helpers_and_a_faulty_check(checker):
    answer = checker.plan("def enc(s):\n    return s[::-1]\n", "assert dec(enc('ab')) == 'ab'\n", "dec")
    assert [decode_value(a) for a in answer["plan"][0][0]] == ["ba"]
    assert "fault" in checker.plan("", "def check(:\n", "f")


def test_runs_that_answered_alike_share_one_replay():
    with CheckHost(512) as checker:
        plan(checker, "add", "", CHECK, "add")
        right = [v(5), v(0), v(2), v(4)]
        assert replay(checker, right) == {"status": "passed"}
        assert replay(checker, right[:1])["status"] == "runtime_error"  # ended without answering call 2
        checker.close()  # the check server is gone: answers already judged are judged without it
        assert replay(checker, right) == {"status": "passed"} and checker._proc is None
        assert replay(checker, right, status="timeout") == {"status": "passed"}  # another run's end: replayed
        assert checker._proc is not None
        # another check under the same name (problem) has a key of its own: no verdict of the old one applies
        plan(checker, "add", "", "assert add(2, 3) == 6\n", "add")
        assert replay(checker, right[:1])["status"] == "wrong_answer"


STEERED = {  # checks that consume the candidate through an iteration a StopIteration would end silently
    "zip_map": "for got, want in zip(map(f, [1, 2]), [2, 3]):\n    assert got == want\n",
    "all_map": "assert all(map(f, [1, 2]))\n",
    "filter": "assert len(list(filter(f, [1, 2]))) == len([])\n",
    "generator": "assert all(f(x) for x in [1, 2])\n",
    "starmap": "import itertools\nfor got in itertools.starmap(f, [(1,), (2,)]):\n    assert got == 99\n",
    "takewhile": "import itertools\nassert list(itertools.takewhile(lambda v: v > 0, map(f, [1]))) == []\n",
    "next_default": "assert next(map(f, [1, 2]), 'none') == 'none'\n",
    "comprehension": "assert [g for g in map(f, [1, 2]) if g != 2] == []\n",
    "sum": "assert sum(map(f, [1, 2])) == 0\n",
    "iter_sentinel": "assert list(iter(lambda: f(1), 2)) == []\n",
}


@pytest.mark.parametrize("raised", ["StopIteration", "StopAsyncIteration"])
@pytest.mark.parametrize("name", sorted(STEERED))
def test_a_program_raising_stopiteration_never_ends_the_checks_iteration(checker, name, raised):
    assert plan(checker, name, "", STEERED[name], "f")["plan"]
    verdict = replay(checker, [x(raised, "")], key=name)
    assert verdict["status"] == "runtime_error", verdict
    assert raised in verdict["error"]


@pytest.mark.parametrize("raised", ["SystemExit", "KeyboardInterrupt", "GeneratorExit"])
def test_an_exit_in_a_call_is_a_runtime_error_even_when_the_check_catches_it(checker, raised):
    check = "for x in [1, 2]:\n    try:\n        f(x)\n    except BaseException:\n        pass\n"
    calls = plan(checker, "exit-caught", "", check, "f")["plan"]
    verdict = replay(checker, [x(raised), x(raised)], go_on=True, key="exit-caught", plan=calls)
    assert verdict["status"] == "runtime_error", verdict


# Burns 0.5 s of CPU (the process's own clock) before it asks the program anything.
BURNING_CHECK = ("import time\n\ndef check(c):\n    t = time.process_time()\n    while time.process_time() - t < 0.5:\n"
                 "        pass\n    assert c(1) == 2\n\ncheck(f)\n")  # fmt: skip


def test_a_check_the_machine_starves_is_judged_and_past_the_stretch_unfinished(monkeypatch):
    """A replay's wall limit on the host is a net for a busy machine, not the check's limit (its CPU is): a check
    using 0.5 s of CPU under a 1 s limit, on a CPU shared with 4 busy processes (~2.5 s of wall, past the 1.5 s
    net), is judged as idle (before: ``timeout``, a label the machine made); past the stretch it is
    ``unfinished`` (the machine's: run again alone, then ``infra_error``), never remembered."""
    from procs import busy

    from bonforge.sandbox import check_host

    monkeypatch.setattr(CheckHost, "GRACE_S", 0.5)  # the net: time limit + 0.5 s, stretched for the machine
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})  # the check server starts on CPU 0 (this process goes back to all CPUs)
    try:
        host = CheckHost(512)
        key = host.plan("", BURNING_CHECK, "f")["key"]
    finally:
        os.sched_setaffinity(0, before)
    with host:
        def replay(limit):  # another limit for each run: no remembered verdict answers it
            return host.replay(key, None, [v(2)], {"status": "ok"}, limit, False)

        assert replay(1.0) == {"status": "passed"}
        with busy(4, [0]):
            assert replay(1.01) == {"status": "passed"}
        monkeypatch.setattr(check_host, "LOAD_STRETCH", 1.0)
        with busy(8, [0]):
            late = replay(1.02)
        assert late["status"] == "unfinished" and "busy" in late["error"], late
        monkeypatch.setattr(check_host, "LOAD_STRETCH", 10.0)
        assert replay(1.02) == {"status": "passed"}  # not remembered: replayed once the machine has room


def test_a_check_stuck_where_no_signal_reaches_is_timeout():
    """Attack: an answer that keeps the check busy inside one C call (``sum`` over a range of 10^10: minutes
    of CPU), where its CPU timer's signal is not handled, is the program's ``timeout`` once the check's CPU is
    spent (the check server counts its check's CPU), never ``unfinished`` (a policy would earn 'no label')."""
    with CheckHost(512) as host:
        key = host.plan("", "assert sum(range(f(1))) >= 0\n", "f")["key"]
        got = host.replay(key, None, [v(10**10)], {"status": "ok"}, 0.5, False)
        assert got["status"] == "timeout", got
        assert host.replay(key, None, [v(1)], {"status": "ok"}, 0.5, False) == {"status": "passed"}  # control
