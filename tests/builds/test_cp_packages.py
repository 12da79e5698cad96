"""Library Checker problem packages through ``bonforge run``: the packages as a problems source, their
solutions as a pool teacher labelled by info.toml (C++), Python programs of ours as a second pool teacher
with a ``language`` field; every solution judged as info.toml says, the checker problems accepting valid
alternative outputs and rejecting invalid ones, a crashing checker the problem's error, and the test-suite
strength in problem_stats."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.sources.problem_package import load_package
from bonforge.storage.catalog import connect
from bonforge.storage.store import StageStore
from cp_programs import MIS_PY

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# Problems chosen to cover every kind at a bounded cost: exact (aplusb, hafnian_of_matrix: two solutions
# that die), checker-needed (maximum_independent_set: any maximum set; polynomial_root_finding: roots in
# any order, print_sorted.cpp prints another valid output than the answer files).
PACKAGES = ("aplusb", "hafnian_of_matrix", "maximum_independent_set", "polynomial_root_finding")

# Ours, per problem: (program, language, right?)
OURS = {
    "aplusb": [("a, b = map(int, input().split())\nprint(a + b)\n", "python", True),
               ("a, b = map(int, input().split())\nprint(a + b + (a > 10**8))\n", "python", False),
               ("a, b = map(int, input().split())\nprint(a + b)\n", "pypy", True)],
    "maximum_independent_set": [(MIS_PY, "python", True),
                                ("import sys\nsys.stdin.readline()\nprint(1)\nprint(0)\n", "python", False),
                                ("print('hello')\n", "python", False)],
}  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory, data_dir, sandbox_image, shared_prefect):
    lc = data_dir / "library-checker"
    if not lc.is_dir():
        pytest.skip("no Library Checker problems in the data mirror")
    root = tmp_path_factory.mktemp("cp")
    packages = root / "packages"
    for name in (*PACKAGES, "common"):
        shutil.copytree(lc / name, packages / name)
    crash = packages / "aplusb_crashing_checker"  # aplusb whose checker dies on every reading
    shutil.copytree(lc / "aplusb", crash)
    (crash / "checker.cpp").write_text("#include <cstdlib>\nint main() { abort(); }\n")
    ours = root / "ours.jsonl"
    ours.write_text("".join(json.dumps({"problem": pid, "languages": [lang for _, lang, _ in progs],
                                        "programs": [{"code": code, "right": ok} for code, _, ok in progs]}) + "\n"
                            for pid, progs in OURS.items()))  # fmt: skip
    recipe = {
        "name": "library-checker", "seed": 0,
        "problems": {"name": "library-checker", "domain": "code", "format": "problem_package",
                     "source": {"path": str(packages)}},
        "teachers": [
            {"name": "package", "engine": "pool", "format": "problem_package", "source": {"path": str(packages)}},
            {"name": "ours", "engine": "pool", "source": {"path": str(ours)}, "match": "id",
             "match_field": "problem", "samples": "programs", "text": "code", "label": "right",
             "language": "languages"},
        ],
        # CPU time is the limit; the wall-clock net is wide (a loaded 2-core machine stretched hafnian's
        # correct.cpp past 10 s x 2 + 1 of wall time once, at load 10-15)
        "verify": {"code": {"extraction": "raw", "time_limit_s": 10.0, "wall_factor": 5.0, "memory_mb": 1024,
                            "candidate_wall_s": 300, "pool_size": 2, "image": sandbox_image}},
        "filter": {"min_pass_rate": 0.0, "max_pass_rate": 1.0, "min_candidates": 1},
        "export": {"name": "library-checker", "allow_empty": True},
    }  # fmt: skip
    (root / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    res = CliRunner().invoke(app, ["run", str(root / "recipe.yaml"), "--store", str(root / "store")])
    assert res.exit_code == 0, res.output[-3000:]
    return root, connect(StageStore(root / "store"))


def _expected(lc, name: str) -> list[tuple[str, str]]:
    """(solution file, expected outcome) of a package's programs, in the pool's sample order."""
    return [(s["name"], s["expected"]) for s in load_package(lc / name, [lc / "common"])[1] if s["expected"]]


def test_every_package_solution_as_info_toml_says(built, data_dir):
    _, con = built
    rows = con.sql("SELECT v.problem_id, c.sample_index, c.language, v.status, v.detail FROM verdicts v "
                   "JOIN candidates c USING (candidate_id) WHERE v.teacher = 'package' "
                   "AND v.problem_id IN ? ORDER BY 1, 2", params=[list(PACKAGES)]).fetchall()  # fmt: skip
    got = {(pid, i): (lang, status, detail) for pid, i, lang, status, detail in rows}
    lc = data_dir / "library-checker"
    wrong = []
    for name in PACKAGES:
        for i, (sol, expected) in enumerate(_expected(lc, name)):
            lang, status, detail = got.pop((name, i))
            ok = {"pass": status == "passed", "fail": status not in ("passed", "sandbox_error"),
                  "tle": status == "timeout", "tle_ok": status in ("passed", "timeout")}[expected]  # fmt: skip
            if not ok or lang != "cpp":
                wrong.append((name, sol, expected, lang, status, (detail or "")[:300]))
    assert wrong == [] and got == {}, (wrong, got)


def test_our_python_programs_and_the_checkers_alternative_outputs(built, data_dir):
    _, con = built
    rows = con.sql("SELECT v.problem_id, c.sample_index, c.language, v.status, v.detail FROM verdicts v "
                   "JOIN candidates c USING (candidate_id) WHERE v.teacher = 'ours'").fetchall()
    got = {(pid, i): (lang, status, detail) for pid, i, lang, status, detail in rows}
    expected = {(pid, i): (lang, ok) for pid, progs in OURS.items() for i, (_, lang, ok) in enumerate(progs)}
    assert {k: (lang, status == "passed") for k, (lang, status, _) in got.items()} == expected, got
    assert "the checker says wrong answer" in got["maximum_independent_set", 1][2]
    assert "presentation error" in got["maximum_independent_set", 2][2]
    # print_sorted.cpp's output differs from the answer files (a token compare rejects it): the checker passes it
    name, _ = _expected(data_dir / "library-checker", "polynomial_root_finding")[1]
    assert name == "print_sorted.cpp"
    sorted_ = con.sql("SELECT status FROM verdicts WHERE candidate_id = 'polynomial_root_finding/package/1'").fetchall()
    assert sorted_ == [("passed",)]


def test_a_crashing_checker_is_the_problems_error(built):
    _, con = built
    rows = con.sql("SELECT status, detail FROM verdicts WHERE problem_id = 'aplusb_crashing_checker'").fetchall()
    assert len(rows) == 2 and {s for s, _ in rows} == {"sandbox_error"}  # correct.cpp and wa.cpp alike
    assert all("checker failed" in d for _, d in rows), rows


def test_suite_strength_in_problem_stats(built):
    """aplusb's tests catch wa.cpp and our wrong Python, hafnian's its two dying programs, the checker of
    maximum_independent_set our two wrong outputs; a problem without known-wrong solutions has none; the
    crashing checker's verdicts say nothing about its tests."""
    _, con = built
    got = {pid: (n, s) for pid, n, s in con.sql(
        "SELECT problem_id, n_known_wrong, suite_strength FROM problem_stats WHERE teacher = '*'").fetchall()}
    assert got == {"aplusb": (2, 1.0), "hafnian_of_matrix": (2, 1.0), "maximum_independent_set": (2, 1.0),
                   "polynomial_root_finding": (0, None), "aplusb_crashing_checker": (0, None)}
