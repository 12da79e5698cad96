"""Forged passes of assert-style (HumanEval) checks: every trick a wrong program could use to pass a check
that ran in its own address space. The check now runs on the host against a proxy of the program, so
each must fail, with the Docker backend and the process backend."""

from __future__ import annotations

import pytest

from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.pool import SandboxPool
from test_sandbox import judge

CHECK = {
    "kind": "assert", "entry_point": "add",
    "check": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(10, 20) == 30\n\n"
        "check(add)\n",
}  # fmt: skip
RIGHT = "def add(x, y):\n    return x + y\n"
WRONG = "def add(x, y):\n    return 0\n"

FORGERIES = {
    # write a success report on the runner's result channel, then leave before the check fails
    "result fd and os._exit": WRONG + "import os\n"
        "for line in (b'{\"s\": \"ok\"}\\n', b'd\\n', b'v [\"i\", \"5\"]\\n'):\n"
    "    os.write(3, line)\nos._exit(0)\n",
    # call the runner's own report function, found on the stack
    "report through sys._getframe": WRONG + "import os, sys\nf = sys._getframe()\nwhile f is not None:\n"
    "    for name in ('report', 'emit'):\n        fn = f.f_locals.get(name)\n        if callable(fn):\n"
    "            for msg in ({'s': 'ok'}, 'd'):\n                try:\n                    fn(msg)\n"
    "                except Exception:\n                    pass\n    f = f.f_back\nos._exit(0)\n",
    "always-true __eq__": "class Yes:\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = object.__hash__\n"
    "def add(x, y):\n    return Yes()\n",
    "int subclass": "class Yes(int):\n    def __eq__(self, other):\n        return True\n"
        "    __ne__ = lambda s, o: False\n"
    "    __hash__ = int.__hash__\ndef add(x, y):\n    return Yes(0)\n",
    # the expected value sits next to the arguments in the calling frame's constants
    "expected values from the check's code": "import sys\ndef add(x, y):\n    c = sys._getframe(1).f_code.co_consts\n"
    "    for i in range(len(c) - 2):\n        if c[i] == x and c[i + 1] == y:\n            return c[i + 2]\n"
        "    return 0\n",
    "the check's text in memory": "import re, sys\ndef add(x, y):\n    f = sys._getframe()\n    while f is not None:\n"
    "        for v in list(f.f_locals.values()):\n"
        "            for s in (v, *(v.values() if isinstance(v, dict) else ())):\n"
    "                m = isinstance(s, str) and re.search(r'candidate\\(%d, %d\\) == (\\d+)' % (x, y), s)\n"
    "                if m:\n                    return int(m.group(1))\n        f = f.f_back\n    return 0\n",
    "sys.settrace swaps check": WRONG + "import sys\ndef _t(frame, event, arg):\n    g = frame.f_globals\n"
    "    c = g.get('check')\n    if getattr(getattr(c, '__code__', None), 'co_filename', '') == 'check.py':\n"
    "        g['check'] = lambda candidate: None\n    return _t\nsys.settrace(_t)\n",
    "patched json.dumps and os._exit": WRONG + "import json, os\n_exit = os._exit\n"
        "json.dumps = lambda *a, **k: '{\"s\": \"ok\"}'\n"
    "os._exit = lambda code: _exit(0)\n",
    "patched runner module": WRONG + "import os, sys\nm = sys.modules['__main__']\n"
    "def forged(*a, **k):\n    os.write(3, b'{\"s\": \"ok\"}\\n')\n    os._exit(0)\n"
    "for name in ('_format_error', 'encode_value', '_exception_line'):\n    if hasattr(m, name):\n"
    "        setattr(m, name, forged)\n",
    "SystemExit whose code compares differently twice": "class Code(int):\n    seen = 0\n    def __eq__(self, other):\n"
    "        Code.seen += 1\n        return Code.seen > 1\n    def __and__(self, other):\n        return 0\n"
    "    __hash__ = int.__hash__\nraise SystemExit(Code(3))\n",
}  # fmt: skip


def _assert_no_forgery(pool) -> None:
    verdicts = judge(pool, [RIGHT, WRONG, *FORGERIES.values()], CHECK)
    assert [v["status"] for v in verdicts[:2]] == ["passed", "wrong_answer"], [v["detail"] for v in verdicts[:2]]
    forged = {name: (v["status"], (v["detail"] or "")[:200]) for name, v in zip(FORGERIES, verdicts[2:], strict=True)}
    assert {name: s for name, (s, _) in forged.items() if s not in ("wrong_answer", "runtime_error")} == {}, forged


@pytest.mark.docker
def test_no_forged_pass_with_docker(docker_pool):
    _assert_no_forgery(docker_pool)


@pytest.fixture(scope="module")
def process_pool():
    with SandboxPool(CodeVerifyConfig(backend="process", pool_size=2, time_limit_s=1.0, memory_mb=256)) as pool:
        yield pool


def test_no_forged_pass_with_the_process_backend(process_pool):
    _assert_no_forgery(process_pool)


def test_the_check_sees_only_builtin_values(process_pool):
    """Values cross as data: containers and numbers as the check's own types; exceptions by builtin class."""
    check = {
        "kind": "assert", "entry_point": "f",
        "check": "def check(c):\n    r = c([1, 2])\n"
            "    assert type(r) is tuple and type(r[0]) is dict and r[1] == {3}\n"
                 "    assert c(10**5000) == 10**5000 + 1 and type(c(1.5)) is float\n"
                 "    try:\n        c('boom')\n    except KeyError as e:\n        assert 'boom' in str(e)\n"
                 "    else:\n        assert False\n    assert c(None) is None\n"
                     "    assert list(c('gen')) == [0, 1, 4] and c('range') == range(3)\n\ncheck(f)\n",
    }  # fmt: skip
    program = (
        "import collections\nclass MyKeyError(KeyError):\n    pass\n"
        "def f(x):\n    if isinstance(x, list):\n        return (collections.OrderedDict(a=x), frozenset({3}))\n"
        "    if x == 'boom':\n        raise MyKeyError('boom')\n    if x == 'gen':\n"
            "        return (i * i for i in range(3))\n"
        "    if x == 'range':\n        return range(3)\n    if x is None:\n        return None\n"
        "    return x + 1 if isinstance(x, int) else x * 2\n"
    )
    assert [v["status"] for v in judge(process_pool, [program], check)] == ["passed"]


def test_checks_whose_calls_depend_on_answers(process_pool):
    """A check that feeds answers back as arguments runs the program again with the longer plan."""
    check = {
        "kind": "assert", "entry_point": "step",
        "check": "def check(c):\n    x = 0\n    for _ in range(5):\n        x = c(x)\n    assert x == 10\n\n"
            "check(step)\n",
    }  # fmt: skip
    got = judge(process_pool, ["def step(x):\n    return x + 2\n", "def step(x):\n    return x + 3\n"], check)
    assert [v["status"] for v in got] == ["passed", "wrong_answer"]
