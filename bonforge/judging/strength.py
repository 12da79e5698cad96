"""Test-suite strength: the fraction of a problem's known-wrong solutions its tests catch.

Datasets often carry solutions known to be wrong (CodeContests' ``incorrect_solutions``; the ``expect = "WA"``
and ``"RE"`` solutions of a problem package). Each is judged like a candidate (``verify_code``, all tests run);
one that does not pass is *caught*. A problem whose suite catches few of them is where false positives come
from: a wrong candidate passes its weak tests. Solutions that are only too slow (``tle``) say nothing about the
tests' coverage and are not counted here.
"""

from __future__ import annotations

import pyarrow as pa

from bonforge.judging.code import Pool, verify_code
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.schema import CANDIDATES

SAYS_NOTHING = ("compile_error", "sandbox_error")  # verdicts that say nothing about the tests: the program never
# ran (a solution that does not build here), or the problem's own check failed

STRENGTH = pa.schema([
    pa.field("problem_id", pa.string(), nullable=False),
    pa.field("n_wrong", pa.int32(), nullable=False),  # known-wrong solutions judged
    pa.field("n_caught", pa.int32(), nullable=False),  # of them, those the tests rejected
    pa.field("strength", pa.float64()),  # n_caught / n_wrong; null when no known-wrong solution was judged
    pa.field("missed", pa.list_(pa.string())),  # the known-wrong solutions that passed every test
])  # fmt: skip


def suite_strength(problems: pa.Table, wrong: list[dict], cfg: CodeVerifyConfig, pool: Pool | None = None) -> pa.Table:
    """One row per problem of ``problems``: how many of its known-wrong solutions (``wrong``: records with
    ``problem_id``, ``name``, ``text`` and optional ``language``) its tests catch. A solution whose verdict says
    nothing about them (``SAYS_NOTHING``) is not counted. (A build measures the same from its known-wrong
    candidates: ``problem_stats.suite_strength``.)"""
    rows = [{"candidate_id": f"{w['problem_id']}/known-wrong/{n}", "problem_id": w["problem_id"],
             "teacher": "known-wrong", "sample_index": n, "text": w["text"], "language": w.get("language")}
            for n, w in enumerate(wrong)]  # fmt: skip
    candidates = pa.Table.from_pylist(rows, schema=CANDIDATES)
    verdicts = verify_code(problems, candidates, cfg, pool).to_pylist() if rows else []
    by_problem: dict[str, list] = {pid: [] for pid in problems.column("problem_id").to_pylist()}
    for w, v in zip(wrong, verdicts, strict=True):
        if v["status"] not in SAYS_NOTHING:
            by_problem[w["problem_id"]].append((w["name"], v["status"] != "passed"))
    out = []
    for pid, judged in by_problem.items():
        caught = sum(ok for _, ok in judged)
        out.append({"problem_id": pid, "n_wrong": len(judged), "n_caught": caught,
                    "strength": caught / len(judged) if judged else None,
                    "missed": [name for name, ok in judged if not ok]})  # fmt: skip
    return pa.Table.from_pylist(out, schema=STRENGTH)


def weak_problems(strength: pa.Table, min_strength: float) -> set[str]:
    """Problems whose suite catches less than ``min_strength`` of their known-wrong solutions (those with none
    judged are not weak: nothing is known)."""
    return {r["problem_id"] for r in strength.to_pylist()
            if r["strength"] is not None and r["strength"] < min_strength}  # fmt: skip
