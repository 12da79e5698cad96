"""A CodeContests-shaped table through ``bonforge run``: ``solutions`` and ``incorrect_solutions`` with
CodeContests' language codes (2 C++, 3 Python 3, 4 Java; 1 Python 2 cannot run), the references judged in
their languages (``fields.solution_languages``), the incorrect ones as a known-wrong pool teacher, the
test-suite strength in problem_stats and ``filter.min_suite_strength`` dropping the weak suite."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.storage.catalog import connect
from bonforge.storage.store import StageStore

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SUM_CPP = ("#include <cstdio>\nint main(){int n; scanf(\"%d\",&n); long long s=0; for(int i=0;i<n;i++){long long x;"
           "scanf(\"%lld\",&x); s+=x;} printf(\"%lld\\n\", s);}\n")
SUM_JAVA = ("import java.util.*;\npublic class Main { public static void main(String[] a) {\n"
            "  Scanner in = new Scanner(System.in); int n = in.nextInt(); long s = 0;\n"
            "  for (int i = 0; i < n; i++) s += in.nextLong();\n  System.out.println(s); } }\n")
SUM_PY3 = "input()\nprint(sum(map(int, input().split())))\n"
SUM_PY2 = "raw_input()\nprint sum(map(int, raw_input().split()))\n"
OVERFLOW_CPP = SUM_CPP.replace("long long s=0", "int s=0").replace("%lld\\n\", s", "%d\\n\", s")
OFF_BY_ONE_PY3 = "input()\nprint(sum(map(int, input().split())) + 1)\n"
OVERFLOW_JAVA = SUM_JAVA.replace("long s = 0", "int s = 0").replace("s += in.nextLong()", "s += in.nextInt()")


def _tests(pairs):
    return {"input": [f"{len(xs)}\n{' '.join(map(str, xs))}\n" for xs in pairs],
            "output": [f"{sum(xs)}\n" for xs in pairs]}


def _row(name: str, public, private, generated, incorrect: list[tuple[int, str]]) -> dict:
    return {
        "name": name, "description": f"{name}: print the sum of n integers.",
        "public_tests": _tests(public), "private_tests": _tests(private), "generated_tests": _tests(generated),
        "solutions": {"language": [2, 4, 3, 1], "solution": [SUM_CPP, SUM_JAVA, SUM_PY3, SUM_PY2]},
        "incorrect_solutions": {"language": [c for c, _ in incorrect], "solution": [s for _, s in incorrect]},
        "time_limit": {"seconds": 2, "nanos": 0}, "memory_limit_bytes": 256 << 20,
    }  # fmt: skip


ROWS = [
    _row("strong", [[1, 2]], [[10**9, 10**9, 10**9]], [[5, 6, 7, 8]],
         [(2, OVERFLOW_CPP), (3, OFF_BY_ONE_PY3), (4, OVERFLOW_JAVA)]),
    _row("weak", [[1, 2]], [[3, 4]], [[0, 0]], [(2, OVERFLOW_CPP), (3, OFF_BY_ONE_PY3)]),  # small numbers only
]


@pytest.fixture(scope="module")
def table(tmp_path_factory, sandbox_image):
    root = tmp_path_factory.mktemp("cc")
    path = root / "code_contests.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    recipe = {
        "name": "codecontests-languages", "seed": 0,
        "problems": {"name": "cc", "domain": "code", "format": "jsonl", "source": {"path": str(path)},
                     "fields": {"question": "description", "id": "name",
                                "tests": ["public_tests", "private_tests", "generated_tests"],
                                "tests_format": "codecontests", "time_limit": "time_limit",
                                "memory_limit": "memory_limit_bytes", "solutions": "solutions.solution",
                                "solution_languages": "solutions.language"},
                     "include_reference": True},
        "teachers": [{"name": "incorrect", "engine": "pool", "source": {"path": str(path)}, "match": "id",
                      "match_field": "name", "samples": "incorrect_solutions.solution",
                      "language": "incorrect_solutions.language", "reference_correct": False}],
        "verify": {"code": {"extraction": "raw", "time_limit_s": 5.0, "pool_size": 2, "image": sandbox_image}},
        # the references count in the filter's pass rate here: a problem whose only other candidates are
        # known-wrong would otherwise be too hard
        "filter": {"min_pass_rate": 0.0, "max_pass_rate": 1.0, "min_candidates": 1, "count_reference": True},
        "export": {"name": "codecontests-languages", "allow_empty": True},
    }  # fmt: skip
    (root / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    return root


def _run(root, *sets: str):
    argv = ["run", str(root / "recipe.yaml"), "--store", str(root / "store")]
    res = CliRunner().invoke(app, argv + [a for s in sets for a in ("--set", s)])
    assert res.exit_code == 0, res.output[-3000:]
    return connect(StageStore(root / "store"))


def test_languages_verdicts_and_strength(table, shared_prefect):
    con = _run(table)
    got = {(pid, t, i): (lang, status) for pid, t, i, lang, status in con.sql(
        "SELECT c.problem_id, c.teacher, c.sample_index, c.language, v.status FROM candidates c "
        "JOIN verdicts v USING (candidate_id)").fetchall()}
    want = {}
    for pid in ("strong", "weak"):
        want |= {(pid, "reference", 0): ("cpp", "passed"), (pid, "reference", 1): ("java", "passed"),
                 (pid, "reference", 2): ("python", "passed")}  # the Python 2 one is left out
    want |= {("strong", "incorrect", 0): ("cpp", "wrong_answer"),
             ("strong", "incorrect", 1): ("python", "wrong_answer"),
             ("strong", "incorrect", 2): ("java", "wrong_answer"),
             ("weak", "incorrect", 0): ("cpp", "passed"),  # its tests hold small numbers only
             ("weak", "incorrect", 1): ("python", "wrong_answer")}
    assert got == want
    stats = {pid: (n, s, reason) for pid, n, s, reason in con.sql(
        "SELECT problem_id, n_known_wrong, suite_strength, drop_reason FROM problem_stats WHERE teacher = '*'")
        .fetchall()}  # fmt: skip
    assert stats == {"strong": (3, 1.0, None), "weak": (2, 0.5, None)}
    meta = json.loads(con.sql("SELECT metadata FROM problems WHERE problem_id = 'strong'").fetchall()[0][0])
    assert meta["reference_languages"] == ["cpp", "java", "python"] and meta["memory_limit_mb"] == 256


def test_a_recipe_can_drop_weak_suites(table, shared_prefect):
    con = _run(table, "filter.min_suite_strength=0.9")
    stats = dict(con.sql("SELECT problem_id, drop_reason FROM problem_stats WHERE teacher = '*'").fetchall())
    assert stats == {"strong": None, "weak": "weak_tests"}
