"""Right programs are judged right: what CPython gives a script (exit codes, standard streams, interpreter
exit, limits a subprocess inherits), in a real container."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from test_sandbox import judge

pytestmark = pytest.mark.docker

FIVE = {"kind": "stdio", "tests": [{"input": "2 3\n", "output": "5\n"}]}
ONE_TWO_THREE = {"kind": "stdio", "tests": [{"input": "", "output": "1\n2\n3\n"}]}

EXITS = {  # sys.exit with an int subclass is that int's exit status, as in CPython
    "sys.exit(False)": "print(5)\nimport sys\nsys.exit(False)\n",
    "an IntEnum 0": "import enum, sys\nclass Code(enum.IntEnum):\n    OK = 0\nprint(5)\nraise SystemExit(Code.OK)\n",
    "an int subclass 256": "class N(int):\n    pass\nprint(5)\nraise SystemExit(N(256))\n",  # 256 & 0xFF
}
FAILING_EXITS = {
    "sys.exit(True)": "print(5)\nimport sys\nsys.exit(True)\n",
    "an IntEnum 3": "import enum, sys\nclass Code(enum.IntEnum):\n    BAD = 3\nprint(5)\nsys.exit(Code.BAD)\n",
}

STREAMS = {
    "sys.__stdout__ between prints": "import sys\nsys.__stdout__.write('1\\n')\nprint(2)\n"
                                     "sys.__stdout__.write('3\\n')\n",
    "sys.stdout.buffer.raw": "import sys\nprint(1, flush=True)\nsys.stdout.buffer.raw.write(b'2\\n3\\n')\n",
    "/dev/stdout": "print(1, flush=True)\nwith open('/dev/stdout', 'w') as f:\n    f.write('2\\n')\nprint(3)\n",
    "/proc/self/fd/1": "import os\nprint(1, flush=True)\nfd = os.open('/proc/self/fd/1', os.O_WRONLY)\n"
                       "os.write(fd, b'2\\n3\\n')\n",
    "/dev/stderr and /dev/stdout": "open('/dev/stderr', 'w').write('log\\n')\n"
                                   "open('/dev/stdout', 'w').write('1 2 3')\n",
    "/dev/stdin": "assert open('/dev/stdin').read() == ''\nprint(1, 2, 3)\n",
    "a TextIOWrapper held in a cycle": "import io\nw = io.TextIOWrapper(open(1, 'wb', closefd=False))\nw.me = w\n"
                                       "w.write('1\\n2\\n3\\n')\n",
    "an object with __del__ in a cycle": "import sys\nclass Out:\n    def __init__(self):\n"
                                         "        self.parts, self.me = [], self\n"
                                         "    def __del__(self):\n        sys.stdout.write(''.join(self.parts))\n"
                                         "out = Out()\nout.parts += ['1\\n', '2\\n', '3\\n']\n",
    "__builtins__ is the module": "__builtins__.print(1, 2, 3, sep='\\n')\n",
}

BIG = 400_000
# a write of 400 KB through a 64 KiB pipe, interrupted every 0.5 ms by a signal whose handler returns
SIGNALLED = f"import signal, sys\nsignal.signal(signal.SIGALRM, lambda *a: None)\n" \
            f"signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)\nsys.stdout.write('7' * {BIG} + '\\n')\n" \
            f"signal.setitimer(signal.ITIMER_REAL, 0)\n"  # fmt: skip

SUBPROCESS_THREADS = """import subprocess, sys
code = "import threading\\nt = threading.Thread(target=print, args=(5,))\\nt.start()\\nt.join()\\n"
sys.stdout.write(subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout)
"""


def statuses(pool, programs: dict, spec: dict, **overrides) -> dict:
    verdicts = judge(pool, list(programs.values()), spec, **overrides)
    return {name: (v["status"], (v["detail"] or "")[:300]) for name, v in zip(programs, verdicts)}


def test_exit_codes_as_cpython_gives_them(docker_pool):
    got = statuses(docker_pool, {**EXITS, **FAILING_EXITS}, FIVE)
    assert {k: s for k, (s, _) in got.items()} == {**dict.fromkeys(EXITS, "passed"),
                                                   **dict.fromkeys(FAILING_EXITS, "runtime_error")}, got  # fmt: skip


def test_every_way_to_the_standard_streams(docker_pool):
    got = statuses(docker_pool, STREAMS, ONE_TWO_THREE)
    assert {k: s for k, (s, _) in got.items()} == dict.fromkeys(STREAMS, "passed"), got


def test_a_write_interrupted_by_signals_keeps_its_tail(docker_pool):
    spec = {"kind": "stdio", "tests": [{"input": "", "output": "7" * BIG + "\n"}]}
    got = statuses(docker_pool, {"signalled": SIGNALLED}, spec)
    assert got["signalled"][0] == "passed", got


def test_a_subprocess_can_start_threads(docker_pool):
    got = statuses(docker_pool, {"threads": SUBPROCESS_THREADS}, FIVE)
    assert got["threads"][0] == "passed", got


def test_prints_are_ignored_where_values_are_judged(docker_pool):
    """Call and assert kinds judge returned values: 3 MB of debug prints (over the 1 MiB output cap) are
    no output_limit."""
    noisy = "    for _ in range(3000):\n        print('debug ' * 170)\n"
    call = {"kind": "call", "fn_name": "f", "tests": [{"args": [1], "output": 2}, {"args": [2], "output": 3}]}
    check = {"kind": "assert", "entry_point": "add",
             "check": "def check(candidate):\n    assert candidate(2, 3) == 5\n\ncheck(add)\n"}  # fmt: skip
    assert judge(docker_pool, [f"def f(x):\n{noisy}    return x + 1\n"], call)[0]["status"] == "passed"
    assert judge(docker_pool, [f"def add(x, y):\n{noisy}    return x + y\n"], check)[0]["status"] == "passed"


def test_the_output_cap_scales_with_the_expected_output(docker_pool):
    """A legal 1.2 MB answer passes under the 1 MiB cap; ten times the expected size is still output_limit."""
    spec = {"kind": "stdio", "tests": [{"input": "", "output": "1\n" * 600_000}]}
    got = statuses(docker_pool, {"right": "import sys\nsys.stdout.write('1\\n' * 600_000)\n",
                                 "flood": "import sys\nsys.stdout.write('1\\n' * 6_000_000)\n"}, spec)  # fmt: skip
    assert {k: s for k, (s, _) in got.items()} == {"right": "passed", "flood": "output_limit"}, got


def test_deep_recursion_in_the_main_thread_and_builtins_in_every_kind(docker_pool):
    """Lifting the stack's soft limit keeps deep recursion through C frames (lru_cache) working in the main
    thread (far past 8 MiB of stack); ``__builtins__`` is the module for call kinds as for scripts."""
    deep = "import functools, sys\nsys.setrecursionlimit(10 ** 6)\n@functools.lru_cache(None)\n" \
           "def depth(n):\n    return 0 if n == 0 else depth(n - 1) + 1\nprint(depth(60000) // 12000)\n"  # fmt: skip
    assert judge(docker_pool, [deep], FIVE)[0]["status"] == "passed"
    call = {"kind": "call", "fn_name": "f", "tests": [{"args": [-3], "output": 3}]}
    assert judge(docker_pool, ["def f(x):\n    return __builtins__.abs(x)\n"], call)[0]["status"] == "passed"


JAVA_RIGHT = {  # each reads two numbers and prints their sum
    "a public Main": "import java.util.*;\npublic class Main { public static void main(String[] a) {\n"
                     "  Scanner s = new Scanner(System.in); System.out.println(s.nextInt() + s.nextInt()); } }\n",
    "a public class named in a comment and a string": "// public class Wrong is not this one\n"
                     "public class Sum { static String t = \"public class Str {\";\n"
                     "  public static void main(String[] a) { java.util.Scanner s = new java.util.Scanner(System.in);"
                     "\n    System.out.println(s.nextInt() + s.nextInt()); } }\n",
    "a main class that is not public": "import java.util.*;\nclass Solution { public static void main(String[] a) {\n"
                     "  Scanner s = new Scanner(System.in); System.out.println(s.nextInt() + s.nextInt()); } }\n",
    "two classes, the public one without main": "public class Helper { static int add(int x, int y) { return x + y; } }"
                     "\nclass Runner { public static void main(String[] a) { java.util.Scanner s = "
                     "new java.util.Scanner(System.in);\n"
                     "    System.out.println(Helper.add(s.nextInt(), s.nextInt())); } }\n",
    "a class in a package": "package contest.a;\nimport java.util.*;\npublic class Main { public static void main("
                     "String[] a) {\n  Scanner s = new Scanner(System.in); System.out.println(s.nextInt() + s.nextInt()"
                     "); } }\n",
}


def test_right_java_programs_are_judged_right(docker_pool):
    """The class declaring main runs whatever its visibility and wherever a public class is named in comments or
    strings (before: compile_error for a class named in a comment, runtime_error for a main class not public)."""
    got = statuses(docker_pool, JAVA_RIGHT, FIVE, default_language="java")
    assert got == dict.fromkeys(JAVA_RIGHT, ("passed", "")), got


def _package(root, solution: str) -> None:
    """A problem package of Library Checker's layout whose solution includes a common header and one of its own
    folders beside sol/ (the shared packages' solutions include neither)."""
    (root / "common").mkdir()
    (root / "common" / "random.h").write_text("#pragma once\ninline long long twice(long long x) { return 2 * x; }\n")
    pkg = root / "sum"
    for folder in ("sol", "tests", "hpp"):
        (pkg / folder).mkdir(parents=True)
    (pkg / "hpp" / "sum.hpp").write_text('#pragma once\n#include "util.hpp"\ninline long long sum(long long a, '
                                         "long long b) { return half(twice(a + b)); }\n")
    (pkg / "hpp" / "util.hpp").write_text("#pragma once\ninline long long half(long long x) { return x / 2; }\n")
    (pkg / "info.toml").write_text('timelimit = 2.0\n[[solutions]]\nname = "correct.cpp"\n')
    (pkg / "sol" / "correct.cpp").write_text(solution)
    (pkg / "tests" / "example_00.in").write_text("2 3\n")
    (pkg / "tests" / "example_00.out").write_text("5\n")


PACKAGE_SOLUTION = ('#include <cstdio>\n#include "random.h"\n#include "../hpp/sum.hpp"\n'
                    'int main() { long long a, b; scanf("%lld %lld", &a, &b); printf("%lld\\n", sum(a, b)); }\n')


def test_package_solutions_that_include_headers_compile(docker_pool, tmp_path):
    """A package's C++ solutions see the package's tree as Library Checker builds them (``-I common``, the
    package's folders beside ``sol/``), and so does a candidate for the problem; a Python program is unaffected
    (before: compile_error, "random.h: No such file or directory")."""
    from bonforge.judging.code import verify_code
    from bonforge.sources.problem_package import load_packages, package_candidates

    _package(tmp_path, PACKAGE_SOLUTION)
    problems = load_packages(tmp_path, "mine")
    include = json.loads(problems.column("tests")[0].as_py())["include"]
    assert include.keys() == {"common/random.h", "hpp/sum.hpp", "hpp/util.hpp"}
    cands = package_candidates(tmp_path, problems, "ref")
    extra = [{**cands.to_pylist()[0], "candidate_id": cid, "text": text, "language": lang}
             for cid, lang, text in (("ours", "cpp", PACKAGE_SOLUTION.replace("sum(a, b)", "twice(a) / 2 + b")),
                                     ("python", "python", "print(sum(map(int, input().split())))\n"),
                                     ("wrong", "cpp", PACKAGE_SOLUTION.replace("sum(a, b)", "sum(a, a)")))]  # fmt: skip
    cands = pa.concat_tables([cands, pa.Table.from_pylist(extra, schema=cands.schema)])
    cfg = docker_pool.cfg.model_copy(update={"extraction": "raw"})
    out = {r["candidate_id"]: r["status"] for r in verify_code(problems, cands, cfg, pool=docker_pool).to_pylist()}
    assert out == {"sum/ref/0": "passed", "ours": "passed", "python": "passed", "wrong": "wrong_answer"}, out
