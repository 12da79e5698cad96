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
