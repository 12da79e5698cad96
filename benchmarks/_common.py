"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("BONFORGE_DATA", REPO.parent / "shared" / "data"))
GSM8K_RECIPE = REPO / "recipes" / "gsm8k-genselect.yaml"


def gsm8k_tables():
    """(problems, candidates) of the GSM8K recipe, loaded in-process."""
    import pyarrow as pa

    from bonforge.config import load_recipe
    from bonforge.data import resolve
    from bonforge.tasks.load_pool import import_pool
    from bonforge.tasks.load import load_problems

    os.environ.setdefault("BONFORGE_DATA", str(DATA))
    recipe = load_recipe(GSM8K_RECIPE)
    problems = load_problems(recipe.problems, resolve(recipe.problems.source))
    cands = pa.concat_tables([import_pool(t, resolve(t.source), problems) for t in recipe.teachers])
    return recipe, problems, cands
