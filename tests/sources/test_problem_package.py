"""A problem package in the Library Checker layout: one clear error for what is missing or malformed."""

from __future__ import annotations

import json

import pytest

from bonforge.errors import DataError
from bonforge.sources.problem_package import load_package


def test_a_package_without_its_checkers_header_is_one_clear_error(tmp_path):
    pkg = tmp_path / "p"
    (pkg / "tests").mkdir(parents=True)
    (pkg / "info.toml").write_text("timelimit = 2.0\n")
    (pkg / "tests" / "a.in").write_text("1\n")
    (pkg / "tests" / "a.out").write_text("1\n")
    (pkg / "checker.cpp").write_text('#include "testlib.h"\nint main(){}\n')
    with pytest.raises(DataError, match="the checker includes 'testlib.h'"):
        load_package(pkg)
    (pkg / "testlib.h").write_text("// header\n")
    row, sols = load_package(pkg)
    assert json.loads(row["tests"])["checker"]["files"] == {"testlib.h": "// header\n"} and sols == []
    (pkg / "info.toml").write_text("timelimit = 'soon'\n")
    with pytest.raises(DataError, match="'timelimit' must be a positive number"):
        load_package(pkg)


def test_a_folder_of_packages_as_problems_and_their_solutions_as_a_pool(data_dir):
    """The shared Library Checker folder: every package a problem (the common headers found beside them), every
    solution program a labelled candidate with its language; grader-linked functions left out."""
    import pyarrow as pa

    from bonforge.sources.problem_package import load_packages, package_candidates

    lc = data_dir / "library-checker"
    if not lc.is_dir():
        pytest.skip("no Library Checker problems in the data mirror")
    problems = load_packages(lc, "lc")
    assert problems.num_rows == 12 and set(problems.column("source").to_pylist()) == {"lc"}
    assert load_packages(lc, "lc", "a*").column("problem_id").to_pylist() == ["aplusb"]
    assert load_packages(lc / "factorize", "lc").column("problem_id").to_pylist() == ["factorize"]
    cands = package_candidates(lc, problems.filter(pa.compute.is_in(problems.column("problem_id"),
                                                                    pa.array(["aplusb", "factorize"]))), "pkg")
    got = [(r["candidate_id"], r["language"], r["reference_correct"]) for r in cands.to_pylist()]
    assert got == [("aplusb/pkg/0", "cpp", True), ("aplusb/pkg/1", "cpp", False),  # ac_func.cpp left out
                   ("factorize/pkg/0", "cpp", True), ("factorize/pkg/1", "cpp", False),  # fixed_RNG: TLE
                   ("factorize/pkg/2", "cpp", True)]  # fmt: skip
    with pytest.raises(DataError, match="no problem package"):
        load_packages(lc, "lc", "nothing-*")


def test_the_headers_solutions_include_travel_in_the_spec_and_nothing_outside_the_package(tmp_path):
    """A C++ solution's quoted includes, found as the compiler finds them (beside the including file, then in
    ``common``), go into the spec by their place in the package's tree; a path out of the package, a link out of
    it and a header that is nowhere are left out (the compiler reports what is missing), never read."""
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "random.h").write_text('#include "deep/more.h"\n')
    (tmp_path / "common" / "deep").mkdir()
    (tmp_path / "common" / "deep" / "more.h").write_text("// more\n")
    (tmp_path / "secret.h").write_text("outside\n")
    pkg = tmp_path / "p"
    for folder in ("sol", "tests", "hpp"):
        (pkg / folder).mkdir(parents=True)
    (pkg / "hpp" / "a.hpp").write_text('#include "b.hpp"\n')
    (pkg / "hpp" / "b.hpp").write_text("// b\n")
    (pkg / "hpp" / "link.h").symlink_to(tmp_path / "secret.h")
    (pkg / "sol" / "local.h").write_text("// beside the source\n")
    (pkg / "info.toml").write_text("timelimit = 1\n")
    (pkg / "tests" / "1.in").write_text("1\n")
    (pkg / "tests" / "1.out").write_text("1\n")
    (pkg / "sol" / "ok.cpp").write_text('#include "random.h"\n#include "../hpp/a.hpp"\n#include "local.h"\n'
                                        '#include "../../secret.h"\n#include "../hpp/link.h"\n#include "nowhere.h"\n'
                                        "int main() {}\n")  # fmt: skip
    (pkg / "sol" / "plain.py").write_text('# include "../../secret.h"\n')
    row, _ = load_package(pkg, [tmp_path / "common"])
    include = json.loads(row["tests"])["include"]
    assert include == {"common/random.h": '#include "deep/more.h"\n', "common/deep/more.h": "// more\n",
                       "hpp/a.hpp": '#include "b.hpp"\n', "hpp/b.hpp": "// b\n",
                       "sol/local.h": "// beside the source\n"}  # fmt: skip
