"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("BONFORGE_DATA", REPO.parent / "shared" / "data"))
GSM8K_RECIPE = REPO / "recipes" / "gsm8k-genselect.yaml"


def side_by_side(probe: str, against: Path, rounds: int) -> dict[str, list[float]]:
    """``{"this tree": medians, "against": medians}`` of the numbers ``probe`` (Python source) prints as a JSON
    list on its last line, run in a fresh interpreter with this tree's code and with the code under
    ``against`` in turn, ``rounds`` times (alternating, so that load on the machine hits both alike)."""
    runs: dict[str, list[list[float]]] = {"this tree": [], "against": []}
    for _ in range(rounds):
        for label, tree in (("this tree", REPO), ("against", against.resolve())):
            out = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(tree)},
                                 capture_output=True, text=True, check=True, cwd=tree)  # fmt: skip
            runs[label].append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {k: [statistics.median(col) for col in zip(*v)] for k, v in runs.items()}


def gsm8k_tables():
    """(problems, candidates) of the GSM8K recipe, loaded in-process."""
    import pyarrow as pa

    from bonforge.config import load_recipe
    from bonforge.sources.data import resolve
    from bonforge.stages.load_pool import import_pool
    from bonforge.stages.load import load_problems

    os.environ.setdefault("BONFORGE_DATA", str(DATA))
    recipe = load_recipe(GSM8K_RECIPE)
    problems = load_problems(recipe.problems, resolve(recipe.problems.source))
    cands = pa.concat_tables([import_pool(t, resolve(t.source), problems) for t in recipe.teachers])
    return recipe, problems, cands


MATH500 = DATA / "math" / "math500.jsonl"


def perturb(answer: str) -> str:
    """A different answer of the same form: its first integer raised by one (``\\frac{1}{2}`` becomes
    ``\\frac{2}{2}``, ``52_8`` becomes ``53_8``), else its negation."""
    import re

    m = re.search(r"\d+", answer)
    if m is None:
        return f"-({answer})"
    return answer[: m.start()] + str(int(m.group()) + 1) + answer[m.end():]


def replace_last_boxed(text: str, new: str) -> str:
    """``text`` with the content of its last ``\\boxed{...}`` replaced by ``new``."""
    start = text.rindex("\\boxed")
    i = text.index("{", start)
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[: i + 1] + new + text[j:]
    raise ValueError("unbalanced \\boxed{")


def math500_tables():
    """(problems, candidates, labels) of MATH-500: per problem its reference solution (correct) and the
    same solution with a perturbed boxed answer (wrong)."""
    import json

    import pyarrow as pa

    rows = [json.loads(line) for line in MATH500.read_text().splitlines()]
    problems = pa.table({"problem_id": [r["unique_id"] for r in rows], "answer": [r["answer"] for r in rows]})
    cands: dict[str, list] = {"candidate_id": [], "problem_id": [], "teacher": [], "text": []}
    labels = {}
    for r in rows:
        for name, text, ok in [("reference", r["solution"], True),
                               ("perturbed", replace_last_boxed(r["solution"], perturb(r["answer"])), False)]:
            cid = f"{r['unique_id']}/{name}"
            for col, value in zip(cands, [cid, r["unique_id"], name, text]):
                cands[col].append(value)
            labels[cid] = ok
    return problems, pa.table(cands), labels
