"""No candidate can fail the verify_code stage, and right programs are judged right (real Docker engine)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from bonforge.schema import CANDIDATES, PROBLEMS
from bonforge.judging.code import verify_code
from test_sandbox import ADD, STDIO_ECHO, judge

pytestmark = pytest.mark.docker

SPECS = {
    "stdio": STDIO_ECHO,
    "call": {"kind": "call", "fn_name": "f", "tests": [{"args": [1], "output": 0.5}]},
    "assert": {"kind": "assert", "entry_point": "add",
               "check": "def check(candidate):\n    assert candidate(2, 3) == 5\n\ncheck(add)\n"},  # fmt: skip
}
DEEP_ON_THE_RESULT_FD = "import os\nos.write(3, b'v ' + b'[' * 200000 + b'\\n')\nos.write(3, b'd\\n')\nos._exit(0)\n"
# (problem kind, program, verdict)
BATCH = [
    ("stdio", ADD, "passed"),
    ("stdio", "print('9' * 5000)\n", "wrong_answer"),  # the host judge once called int() past 4,300 digits
    ("stdio", DEEP_ON_THE_RESULT_FD, "wrong_answer"),
    ("stdio", "import os\nos.write(3, b'e ' + b'x' * 50_000_000)\n", "output_limit"),  # 50 MB on the result channel
    ("stdio", "import sys\nsys.stderr.write('e' * 50_000_000)\n", "wrong_answer"),
    ("call", "def f(x):\n    return x / 2\n", "passed"),
    ("call", "def f(x):\n    return 10**400\n", "wrong_answer"),  # a float is expected: float() would overflow
    ("call", "def f(x):\n    return 10**5000\n", "wrong_answer"),
    ("call", "def f(x):\n    a = []\n    for _ in range(100000):\n        a = [a]\n    return a\n", "wrong_answer"),
    ("call", DEEP_ON_THE_RESULT_FD.replace("os.write(3, b'd\\n')\n", ""), "wrong_answer"),
    ("call", "def f(x):\n    return 'x' * 5_000_000\n", "output_limit"),
    ("call", "def f(x):\n    return float('nan')\n", "wrong_answer"),
    ("assert", "def add(x, y):\n    return x + y\n", "passed"),
    ("assert", DEEP_ON_THE_RESULT_FD, "wrong_answer"),
    ("assert", "def add(x, y):\n    return 10**5000\n", "wrong_answer"),
    ("assert", "import os\nos.write(3, b'x [\"ValueError\", \"' + b'm' * 10_000_000 + b'\"]\\n')\nos._exit(0)\n",
     "output_limit"),
    ("assert", "import os\nos.write(3, b'x [\"SystemExit\", \"\"]\\nd\\n')\nos._exit(0)\n", "runtime_error"),
    # lone surrogates in an exception's class name or message are no UTF-8: the verdict row once failed to write
    ("assert", "def add(x, y):\n    raise ValueError('\\ud800')\n", "runtime_error"),
    ("assert", "import os\nos.write(3, b'x [\"\\\\udcffError\", \"\\\\ud800\"]\\nd\\n')\nos._exit(0)\n",
     "runtime_error"),
]  # fmt: skip


def test_no_candidate_fails_the_stage(docker_pool):
    """Programs whose answers once crashed the host (digit limits, float overflow, deep JSON, 100 MB
    answers) mixed with ordinary ones: one verdict per row, each the candidate's own."""
    problems = pa.Table.from_pylist(
        [{"problem_id": k, "source": "t", "domain": "code", "question": "", "tests": json.dumps(s)}
         for k, s in SPECS.items()],
        schema=PROBLEMS,
    )  # fmt: skip
    cands = pa.Table.from_pylist(
        [{"candidate_id": f"{kind}/{i}", "problem_id": kind, "teacher": "t", "sample_index": i, "text": program}
         for i, (kind, program, _) in enumerate(BATCH)],
        schema=CANDIDATES,
    )  # fmt: skip
    cfg = docker_pool.cfg.model_copy(update={"extraction": "raw"})
    verdicts = verify_code(problems, cands, cfg, pool=docker_pool).to_pylist()
    got = [(v["candidate_id"], v["status"]) for v in verdicts]
    assert got == [(f"{kind}/{i}", want) for i, (kind, _, want) in enumerate(BATCH)], [v["detail"] for v in verdicts]


RIGHT_PROGRAMS = {
    "a thread started without join": "import threading, time\ndef work():\n    time.sleep(0.1)\n"
    "    a, b = map(int, input().split())\n    print(a + b)\nthreading.Thread(target=work).start()\n",
    "output written by an atexit handler": "import atexit\na, b = map(int, input().split())\n"
    "atexit.register(lambda: print(a + b))\n",
    "all of stdin by its size": "import os\na, b = map(int, os.read(0, os.fstat(0).st_size).split())\nprint(a + b)\n",
    "deep recursion within the stack limit": "import sys\nfrom functools import lru_cache\n"
        "sys.setrecursionlimit(10**6)\n"
    "@lru_cache(None)\ndef depth(n):\n    return 0 if n == 0 else depth(n - 1) + 1\n"
    "a, b = map(int, input().split())\nprint(depth(40000) - 40000 + a + b)\n",
    # the program's functions are found by name in sys.modules["__main__"] (pickled to the pool's workers)
    "a multiprocessing pool of its own function": "import multiprocessing\ndef ident(v):\n    return v\n"
    "if __name__ == '__main__':\n    a, b = map(int, input().split())\n    with multiprocessing.Pool(2) as p:\n"
    "        print(sum(p.map(ident, [a, b])))\n",
    # the fast-I/O template of many competitive solutions reads the streams' mode, as open() sets it
    "a fast-I/O wrapper reading the streams' mode": "import io, os, sys\nclass FastIO(io.IOBase):\n"
    "    def __init__(self, file):\n        self._fd = file.fileno()\n        self.buffer = io.BytesIO()\n"
    "        self.writable = 'x' in file.mode or 'r' not in file.mode\n"
    "    def flush(self):\n        if self.writable:\n            os.write(self._fd, self.buffer.getvalue())\n"
    "            self.buffer.truncate(0), self.buffer.seek(0)\nout = FastIO(sys.stdout)\n"
    "a, b = map(int, os.read(FastIO(sys.stdin)._fd, 99).split())\n"
    "out.buffer.write(b'%d\\n' % (a + b))\nout.flush()\n",
    # sys.stdout replaced by a writer that needs the program's globals: flushed before they are cleared
    "a stdout writer flushed at exit": "import os, sys\nclass Out:\n    mode = 'w'\n    parts = []\n"
    "    def write(self, s):\n        self.parts.append(s)\n    def flush(self):\n"
    "        os.write(1, ''.join(self.parts).encode())\n        self.parts.clear()\nsys.stdout = Out()\n"
    "a, b = map(int, input().split())\nprint(a + b)\n",
    # flushed when the interpreter clears the program's namespace at exit
    "a file on stdout left open": "out = open(1, 'w')\na, b = map(int, input().split())\n"
        "out.write(str(a + b) + '\\n')\n",
}  # fmt: skip


@pytest.mark.parametrize("name", list(RIGHT_PROGRAMS))
def test_right_programs_are_judged_right(docker_pool, name):
    assert [v["status"] for v in judge(docker_pool, [RIGHT_PROGRAMS[name]])] == ["passed"]


def test_integers_of_any_length_crlf_input_and_large_outputs(docker_pool):
    big = {"kind": "stdio", "tests": [{"input": "5000\n", "output": "1" + "0" * 5000 + "\n"}]}
    got = judge(docker_pool, ["print(10 ** int(input()))\n", "print(10 ** int(input()) + 1)\n"], big)
    assert [v["status"] for v in got] == ["passed", "wrong_answer"]
    crlf = {"kind": "stdio", "tests": [{"input": "abc\r\n2 3\r\n", "output": "yes\n5\n"}]}
    program = "s = input()\nprint('yes' if s == 'abc' else repr(s))\na, b = map(int, input().split())\nprint(a + b)\n"
    assert judge(docker_pool, [program], crlf)[0]["status"] == "passed"
    near_cap = docker_pool.cfg.output_limit_bytes - 4096
    large = {"kind": "stdio", "tests": [{"input": "", "output": "7 " * (near_cap // 2)}]}
    assert judge(docker_pool, [f"print('7 ' * {near_cap // 2})\n"], large)[0]["status"] == "passed"


# A set of integers 2**61 - 1 apart, which all hash alike: building it once took the host quadratic time
# (30,000 of them, ~12 s; the result channel carries ~40,000 per MB).
COLLIDING = ("import os\nP = (1 << 61) - 1\n"
    "items = ','.join('[\"i\", \"%x\"]' % (P * k + 5) for k in range(16, 30016))\n"
             "os.write(3, ('v [\"s\", [' + items + ']]\\n').encode())\nos._exit(0)\n")  # fmt: skip


def test_values_crafted_to_share_hashes_are_refused(docker_pool):
    (verdict,) = judge(docker_pool, [COLLIDING], SPECS["call"])
    assert verdict["status"] == "wrong_answer" and "share hashes" in verdict["detail"], verdict


@pytest.mark.timeout(120)
def test_judging_any_output_takes_linear_time(docker_pool):
    """A run of digits ending in a letter where a float is expected: the judge's number pattern once
    backtracked quadratically on it (300,000 digits: about an hour of the host's time)."""
    spec = {"kind": "stdio", "tests": [{"input": "", "output": "0.5\n"}]}
    (verdict,) = judge(docker_pool, ["print('1' * 300000 + 'a')\n"], spec)
    assert verdict["status"] == "wrong_answer", verdict


def test_answers_before_a_hang_count_and_large_answers_pass(docker_pool):
    """The result pipe is read only when the runner wakes for something else (the zygote, stdout, its poll)
    when it can hold the whole output limit, else as lines arrive: either way every answer given before a
    hang is judged, and answers up to the cap pass."""
    spec = {"kind": "assert", "entry_point": "add",
            "check": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(0, 0) == 0\n\n"
                "check(add)\n"}  # fmt: skip
    hangs = "def add(x, y):\n    if x == 0:\n        while True:\n            pass\n    return {}\n"
    got = judge(docker_pool, [hangs.format(6), hangs.format(5)], spec, time_limit_s=1.0)
    assert [v["status"] for v in got] == ["wrong_answer", "timeout"]
    for limit in (docker_pool.cfg.output_limit_bytes, 4 << 20):  # 4 MiB: over the kernel's largest pipe
        n = limit - 65536
        spec = {"kind": "assert", "entry_point": "f", "check": f"assert f(1) == 'x' * {n}\nassert f(2) == 'x'\n"}
        program = f"def f(k):\n    return 'x' * ({n} if k == 1 else 1)\n"
        assert [v["status"] for v in judge(docker_pool, [program], spec, output_limit_bytes=limit)] == ["passed"]
