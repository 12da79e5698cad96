"""Test-suite strength on a real problem: the fraction of known-wrong solutions its tests catch."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from bonforge.judging.strength import suite_strength, weak_problems
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.schema import PROBLEMS
from bonforge.sources.problem_package import load_package

pytestmark = pytest.mark.docker


def test_suite_strength_from_known_wrong_solutions(data_dir, sandbox_image):
    """aplusb's full suite catches its wrong solutions; the same problem with its two example tests only
    misses upstream's wa.cpp (right on small numbers): strength 1.0 against 0.5."""
    lc = data_dir / "library-checker"
    if not lc.is_dir():
        pytest.skip("no Library Checker problems in the data mirror")
    cfg = CodeVerifyConfig(image=sandbox_image, pool_size=2, time_limit_s=5.0, memory_mb=512)
    row, sols = load_package(lc / "aplusb", [lc / "common"])
    spec = json.loads(row["tests"])
    examples = dict(row, problem_id="aplusb-examples",
                    tests=json.dumps(dict(spec, tests=[t for t, name in zip(spec["tests"], json.loads(
                        row["metadata"])["tests"], strict=True) if name.startswith("example")])))  # fmt: skip
    wrong_cpp = next(s for s in sols if s["expected"] == "fail")
    known = [{"problem_id": pid, "name": name, "text": text, "language": lang}
             for pid in ("aplusb", "aplusb-examples")
             for name, text, lang in ((wrong_cpp["name"], wrong_cpp["text"], "cpp"),
                                      ("off-by-one.py", "a, b = map(int, input().split())\nprint(a + b + 1)\n",
                                       "python"))]  # fmt: skip
    table_ = suite_strength(pa.Table.from_pylist([row, examples], schema=PROBLEMS), known, cfg)
    got = {r["problem_id"]: (r["n_wrong"], r["n_caught"], r["strength"], r["missed"]) for r in table_.to_pylist()}
    assert got == {"aplusb": (2, 2, 1.0, []), "aplusb-examples": (2, 1, 0.5, ["wa.cpp"])}
    assert weak_problems(table_, 0.9) == {"aplusb-examples"}
