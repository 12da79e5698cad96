"""The competitive-programming judge on real problems: C++, Java, PyPy and Python programs, built once in the
sandbox; Library Checker's testlib checkers compiled once and run in a sandbox of their own; a problem's
memory limit; hostile C++ and Java programs (and a checker that fails) never reaching another verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from bonforge.judging.code import verify_code
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.schema import CANDIDATES, PROBLEMS
from bonforge.sources.problem_package import load_package
from cp_programs import MIS_PY

pytestmark = pytest.mark.docker

MIS_TOO_SMALL_PY = "import sys\nn = int(sys.stdin.readline().split()[0])\nprint(1)\nprint(0)\n"  # one vertex: too small
MIS_GARBAGE = "print('hello')\n"  # not a number: a presentation error
APLUSB_PY = "a, b = map(int, input().split())\nprint(a + b)\n"
APLUSB_WRONG_PY = "a, b = map(int, input().split())\nprint(a + b + (a > 10**8))\n"
APLUSB_JAVA = ("import java.util.*;\npublic class Sum {\n  public static void main(String[] x) {\n"
               "    Scanner s = new Scanner(System.in);\n"
               "    System.out.println(s.nextLong() + s.nextLong());\n  }\n}\n")
APLUSB_CPP = "#include <cstdio>\nint main(){long long a,b;scanf(\"%lld %lld\",&a,&b);printf(\"%lld\\n\",a+b);}\n"


def fenced(lang: str, text: str) -> str:
    return f"Here it is:\n```{lang}\n{text}```\n"


def table(problems: list[dict], candidates: list[tuple[str, str, str]], language: dict | None = None):
    """(problems, candidates) tables; candidates as (id, problem, text)."""
    rows = [{"candidate_id": cid, "problem_id": pid, "teacher": cid, "sample_index": 0, "text": text}
            for cid, pid, text in candidates]  # fmt: skip
    cands = pa.Table.from_pylist(rows, schema=CANDIDATES)
    if language is not None:
        cands = cands.set_column(cands.schema.get_field_index("language"), "language",
                                 pa.array([language.get(c[0]) for c in candidates], pa.string()))
    return pa.Table.from_pylist(problems, schema=PROBLEMS), cands


@pytest.fixture(scope="module")
def lc(data_dir) -> Path:
    path = data_dir / "library-checker"
    if not path.is_dir():
        pytest.skip("no Library Checker problems in the data mirror")
    return path


@pytest.fixture(scope="module")
def cfg(sandbox_image) -> CodeVerifyConfig:
    return CodeVerifyConfig(image=sandbox_image, pool_size=2, time_limit_s=5.0, memory_mb=512, candidate_wall_s=120)


def judge(problems, candidates, cfg, language=None) -> dict[str, dict]:
    out = verify_code(*table(problems, candidates, language), cfg)
    return {r["candidate_id"]: r for r in out.to_pylist()}


def test_library_checker_solutions_and_our_own_in_four_languages(lc, cfg):
    """aplusb and maximum_independent_set (its checker accepts any maximum set): every upstream solution as
    info.toml expects, our Python, PyPy and Java programs, and wrong ones of ours rejected."""
    problems, candidates = [], []
    expected = {}
    for name in ("aplusb", "maximum_independent_set"):
        row, sols = load_package(lc / name, [lc / "common"])
        assert json.loads(row["tests"])["checker"]["files"].keys() == {"testlib.h"}
        problems.append(row)
        for s in sols:
            if s["expected"] is not None:  # function-style solutions need the grader: not programs
                candidates.append((f"{name}/{s['name']}", name, fenced("cpp", s["text"])))
                expected[f"{name}/{s['name']}"] = s["expected"]
    ours = {
        "aplusb/py": ("aplusb", fenced("python", APLUSB_PY), "pass"),
        "aplusb/pypy": ("aplusb", fenced("pypy3", APLUSB_PY), "pass"),
        "aplusb/java": ("aplusb", fenced("java", APLUSB_JAVA), "pass"),
        "aplusb/c++": ("aplusb", fenced("c++", APLUSB_CPP), "pass"),
        "aplusb/py-wrong": ("aplusb", fenced("py", APLUSB_WRONG_PY), "fail"),
        "mis/py": ("maximum_independent_set", fenced("python", MIS_PY), "pass"),
        "mis/py-too-small": ("maximum_independent_set", fenced("python", MIS_TOO_SMALL_PY), "fail"),
        "mis/py-garbage": ("maximum_independent_set", fenced("python", MIS_GARBAGE), "fail"),
    }
    candidates += [(cid, pid, text) for cid, (pid, text, _) in ours.items()]
    expected.update({cid: e for cid, (_, _, e) in ours.items()})
    verdicts = judge(problems, candidates, cfg)
    got = {cid: ("pass" if v["status"] == "passed" else "fail") for cid, v in verdicts.items()}
    assert got == expected, {cid: (v["status"], (v["detail"] or "")[:300]) for cid, v in verdicts.items()}
    assert "the checker says wrong answer" in verdicts["mis/py-too-small"]["detail"]
    assert "presentation error" in verdicts["mis/py-garbage"]["detail"]
    assert verdicts["aplusb/wa.cpp"]["tests_passed"] == 6  # as the corpus's README measured


def test_compile_errors_carry_the_compilers_message(lc, cfg):
    row, _ = load_package(lc / "aplusb", [lc / "common"])
    verdicts = judge([row], [("cpp", "aplusb", fenced("cpp", "int main( {\n")),
                             ("java", "aplusb", fenced("java", "public class A { void f( }\n")),
                             ("pypy", "aplusb", fenced("pypy", "def f(:\n")),
                             ("rust", "aplusb", "```cpp\nfn main() {}\n```\n"),
                             ("named", "aplusb", APLUSB_PY)],
                     cfg, language={"named": "cobol"})  # fmt: skip
    assert {c: v["status"] for c, v in verdicts.items()} == dict.fromkeys(verdicts, "compile_error")
    assert "error:" in verdicts["cpp"]["detail"] and "main.cpp" in verdicts["cpp"]["detail"]
    assert "A.java" in verdicts["java"]["detail"]
    assert "SyntaxError" in verdicts["pypy"]["detail"]
    assert verdicts["named"]["detail"].startswith("the candidate names an unknown language 'cobol'")


HOSTILE = {
    "fork bomb": ("cpp", "#include <unistd.h>\nint main(){while(1) fork();}\n", {"runtime_error", "timeout"}),
    "memory": ("cpp", "#include <vector>\nint main(){std::vector<long long> v; while(1) v.push_back(1);}\n",
               {"memory_limit"}),
    "memory (java)": ("java", "import java.util.*;\npublic class M { public static void main(String[] a) {\n"
                      "  List<long[]> l = new ArrayList<>(); while (true) l.add(new long[1 << 20]); } }\n",
                      {"memory_limit"}),
    "output flood": ("cpp", "#include <cstdio>\nint main(){while(1) fputs(\"xxxxxxxxxxxxxxxx\", stdout);}\n",
                     {"output_limit"}),
    "writes outside": ("cpp", "#include <cstdio>\nint main(){FILE*f=fopen(\"/opt/bonforge/runner.py\",\"w\");"
                       "FILE*g=fopen(\"/etc/passwd\",\"a\");return f||g ? 0 : 1;}\n", {"runtime_error"}),
    "include /dev/zero": ("cpp", "#include </dev/zero>\n", {"compile_error"}),
    "template bomb": ("cpp", "template<int N> struct F { static const int v = F<N-1>::v + F<N-2>::v; };\n"
                      "template<> struct F<0> { static const int v = 0; };\n"
                      "template<> struct F<1> { static const int v = 1; };\n"
                      "int main(){ return F<100000>::v; }\n", {"compile_error"}),
    "include /dev/urandom": ("cpp", "#include </dev/urandom>\nint main(){}\n", {"compile_error"}),
    "a gigabyte object file": ("cpp", "char a[1 << 30] = {1};\nint main(){ return a[12345]; }\n", {"compile_error"}),
    "fork bomb (java)": ("java", "public class F { public static void main(String[] a) {\n  while (true) new Thread("
                         "() -> { try { Thread.sleep(600000); } catch (InterruptedException e) {} }).start(); } }\n",
                         {"runtime_error", "timeout", "memory_limit"}),
    "fork bomb (java, processes)": ("java", "public class P { public static void main(String[] a) throws Exception "
                                    "{\n  while (true) new ProcessBuilder(\"java\", \"P\").start(); } }\n",
                                    {"runtime_error", "timeout", "memory_limit"}),
    "output flood (java)": ("java", "public class O { public static void main(String[] a) {\n  while (true) "
                            "System.out.print(\"xxxxxxxxxxxxxxxx\"); } }\n", {"output_limit"}),
    "writes outside (java)": ("java", "import java.io.*;\npublic class W {\n  static int opened(String p) { try "
                              "{ new FileWriter(p, true).close(); return 1; } catch (IOException e) { return 0; } }"
                              "\n  public static void main(String[] a) { System.exit(opened(\"/opt/bonforge/runner.py"
                              "\") + opened(\"/etc/passwd\") + opened(\"/usr/bin/x\") == 0 ? 1 : 0); } }\n",
                              {"runtime_error"}),  # exit 1 only when every write failed
    "kills its parent": ("cpp", "#include <signal.h>\n#include <unistd.h>\nint main(){kill(getppid(),9);"
                         "kill(1,9);kill(-1,9);return 0;}\n", {"wrong_answer", "runtime_error"}),
    "checker attack": ("cpp", "#include <cstdio>\nint main(){printf(\"1\\n\");for(int i=0;i<10000;i++)"
                       "printf(\"99999999999999999999999 -1 %d \\xff\\xfe ok\\n\", i);}\n", {"wrong_answer"}),
    "checker attack (java)": ("java", "public class C { public static void main(String[] a) {\n"
                              "  System.out.print(\"ok\\n\\u0000\\u0000 -2147483649\\n\"); } }\n", {"wrong_answer"}),
}


# The battery's limits: a program built to run out of time costs its wall limit (the Java thread bomb's threads
# sleep: 21 s a test at 5 s x 2 for Java, x 2 + 1), so each stops at its first failing test and the CPU limit
# is 2 s (Java: 4 s, above the 0.6 s of CPU its memory bomb takes to fill the heap); the right program passes
# all three tests in well under 0.1 s each.
HOSTILE_LIMITS = {"build_time_limit_s": 10.0, "time_limit_s": 2.0, "stop_on_first_failure": True}


def test_hostile_cpp_and_java_programs_get_their_own_verdicts(lc, cfg):
    """Each gets a candidate's verdict (never sandbox_error), and a right program judged with them passes."""
    row, _ = load_package(lc / "maximum_independent_set", [lc / "common"])
    spec = json.loads(row["tests"])
    spec["tests"] = spec["tests"][:3]  # three tests are enough for these programs
    row = dict(row, tests=json.dumps(spec))
    candidates = [(name, row["problem_id"], fenced(lang, text)) for name, (lang, text, _) in HOSTILE.items()]
    candidates.append(("right", row["problem_id"], fenced("python", MIS_PY)))
    verdicts = judge([row], candidates, cfg.model_copy(update=HOSTILE_LIMITS))
    got = {name: verdicts[name]["status"] for name in HOSTILE}
    assert {n: s for n, s in got.items() if s not in HOSTILE[n][2]} == {}, {
        n: (verdicts[n]["status"], (verdicts[n]["detail"] or "")[:200]) for n in HOSTILE}
    assert verdicts["right"]["status"] == "passed", verdicts["right"]["detail"]
    assert verdicts["right"]["tests_passed"] == 3


def test_a_checker_that_fails_is_the_problems_error(lc, cfg):
    """testlib's FAIL (exit 3: the jury's answer is worse than the contestant's), a crashing checker and one
    that does not compile: the problem's error (sandbox_error, the checker named), never a candidate's
    failure; a candidate wrong on another test is still wrong."""
    row, _ = load_package(lc / "discrete_logarithm_mod", [lc / "common"])
    spec = json.loads(row["tests"])
    spec["tests"] = spec["tests"][:2]
    correct = (lc / "discrete_logarithm_mod" / "sol" / "correct.cpp").read_text()
    fail = dict(row, problem_id="fail", tests=json.dumps(dict(spec, tests=[
        dict(t, output=" ".join("-1" for _ in t["output"].split()) + "\n") for t in spec["tests"]])))
    crash = dict(row, problem_id="crash",
                 tests=json.dumps(dict(spec, checker={"source": "#include <cstdlib>\nint main(){abort();}\n"})))
    broken = dict(row, problem_id="broken", tests=json.dumps(dict(spec, checker={"source": "int main( {\n"})))
    verdicts = judge([fail, crash, broken], [
        ("fail/right", "fail", fenced("cpp", correct)), ("crash/right", "crash", fenced("cpp", correct)),
        ("broken/right", "broken", fenced("cpp", correct)), ("crash/compile", "crash", fenced("cpp", "int x(")),
    ], cfg)  # fmt: skip
    assert verdicts["fail/right"]["status"] == "sandbox_error"
    assert "checker reported its own failure (exit 3)" in verdicts["fail/right"]["detail"]
    assert "FAIL" in verdicts["fail/right"]["detail"]
    assert verdicts["crash/right"]["status"] == "sandbox_error"
    assert "checker failed" in verdicts["crash/right"]["detail"]
    assert verdicts["broken/right"]["status"] == "sandbox_error"
    assert "checker does not compile" in verdicts["broken/right"]["detail"]
    assert verdicts["crash/compile"]["status"] == "compile_error"  # its own fault stays its own


def test_a_problems_memory_limit_applies(cfg):
    """A problem's ``memory_mb`` is applied; without one the recipe's (a table's limit reaches the spec through
    its loader: ``tests/builds/test_code_contests.py``)."""
    hog = "#include <vector>\nint main(){std::vector<char> v(200 << 20, 1); return v[12345] == 1 ? 0 : 4;}\n"
    tests = {"kind": "stdio", "tests": [{"input": "", "output": ""}]}
    problems = [
        {"problem_id": "tight", "domain": "code", "tests": json.dumps(dict(tests, memory_mb=64))},
        {"problem_id": "roomy", "domain": "code", "tests": json.dumps(tests)},
    ]  # fmt: skip
    verdicts = judge(problems, [(p["problem_id"], p["problem_id"], fenced("cpp", hog)) for p in problems]
                     + [("tight/py", "tight", fenced("python", "x = bytearray(200 << 20)\n"))], cfg)  # fmt: skip
    assert verdicts["tight"]["status"] == "memory_limit", verdicts["tight"]["detail"]
    assert verdicts["tight/py"]["status"] == "memory_limit", verdicts["tight/py"]["detail"]
    assert verdicts["roomy"]["status"] == "passed", verdicts["roomy"]["detail"]


CRASHES_ON_BOOM = r'''#include <cstdio>
#include <cstdlib>
#include <cstring>
int main(int argc, char** argv) {
    char out[64] = {0}, ans[64] = {0};
    FILE* o = fopen(argv[2], "r"); FILE* a = fopen(argv[3], "r");
    if (fscanf(o, "%63s", out) != 1) return 2;
    if (strcmp(out, "boom") == 0) abort();  // a checker bug that only this output reaches
    if (fscanf(a, "%63s", ans) != 1) return 3;
    return strcmp(out, ans) == 0 ? 0 : 1;
}
'''


def test_a_checker_crashed_by_one_output_rejects_that_output(cfg):
    """A checker that crashes only on a candidate's output (it accepts the jury's answer, run as a control):
    that candidate's wrong_answer, never the problem's error (which a policy could learn to reach); the right
    program still passes, and a checker that crashes on the jury's answer too stays the problem's error."""
    tests = {"kind": "stdio", "tests": [{"input": "2 3\n", "output": "5\n"}, {"input": "1 1\n", "output": "2\n"}]}
    problems = [{"problem_id": "buggy", "domain": "code", "tests": json.dumps(dict(tests, checker={
                    "source": CRASHES_ON_BOOM}))},
                {"problem_id": "broken", "domain": "code", "tests": json.dumps(dict(tests, checker={
                    "source": CRASHES_ON_BOOM.replace('strcmp(out, "boom") == 0', "true")}))}]  # fmt: skip
    verdicts = judge(problems, [("right", "buggy", fenced("python", APLUSB_PY)),
                                ("boom", "buggy", fenced("python", "print('boom')\n")),
                                ("wrong", "buggy", fenced("python", "print(7)\n")),
                                ("broken/right", "broken", fenced("python", APLUSB_PY))], cfg)  # fmt: skip
    got = {c: v["status"] for c, v in verdicts.items()}
    assert got == {"right": "passed", "boom": "wrong_answer", "wrong": "wrong_answer",
                   "broken/right": "sandbox_error"}, verdicts  # fmt: skip
    assert "the checker crashed on this output (it accepts the jury's answer)" in verdicts["boom"]["detail"]
    assert "on the jury's answer too" in verdicts["broken/right"]["detail"]


JAVA_SHAPES = {  # right programs whose main class only a careful reading finds (attacks on java_names)
    "escaped": "public \\u0063lass Sol { \\u0070ublic static void main(String[] a) { System.out.println(5); } }\n",
    "nested-first": "public class Sol {\n"
                    "  static class In { public static void main(String[] a) { System.out.println(4); } }\n"
                    "  public static void main(String[] a) { System.out.println(5); }\n}\n",
    "interface": "interface Sol { static void main(String[] a) { System.out.println(5); } }\n",
    "record": "record Sol(int x) { public static void main(String[] a) { System.out.println(5); } }\n",
    "enum": "enum Sol { A; public static void main(String[] a) { System.out.println(5); } }\n",
    "jdk-name": "public class String { public static void main(java.lang.String[] a) { System.out.println(5); } }\n",
    "two-mains": "class A { public static void main(String[] a) { System.out.println(4); } }\n"
                 "public class B { public static void main(String[] a) { System.out.println(5); } }\n",
}


def test_right_java_programs_run_whatever_shape_their_main_class_has(cfg):
    """Unicode escapes (as javac reads them), a nested class's main before the public class's own, an
    interface's main (public unsaid), records, enums, a class named like a JDK class: each right program passes
    (the escaped one was compile_error, the nested one wrong_answer, the interface's runtime_error)."""
    problems = [{"problem_id": "five", "domain": "code",
                 "tests": json.dumps({"kind": "stdio", "tests": [{"input": "", "output": "5\n"}]})}]
    verdicts = judge(problems, [(k, "five", fenced("java", v)) for k, v in JAVA_SHAPES.items()], cfg)
    assert {k: v["status"] for k, v in verdicts.items()} == dict.fromkeys(JAVA_SHAPES, "passed"), verdicts
