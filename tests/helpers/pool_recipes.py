"""A recipe over a pool teacher, written into a test's folder: the shape most build tests start from."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

POOL_TEACHER = {"name": "t", "engine": "pool", "source": {"path": "pool.jsonl"}, "match": "order"}


def pool_recipe(folder: Path, name: str, problems: dict, pool: list[dict] | None = None, teacher: dict | None = None,
                **extra) -> Path:
    """``folder/recipe.yaml`` building dataset ``name`` from problems ``problems`` (merged over a ``name: toy``
    source) with one pool teacher (``teacher``, else ``POOL_TEACHER``); ``pool``: the rows of ``pool.jsonl``,
    written when given; ``extra``: more top-level recipe fields."""
    if pool is not None:
        (folder / "pool.jsonl").write_text("".join(json.dumps(row) + "\n" for row in pool))
    doc = {"name": name, "problems": {"name": "toy", **problems}, "teachers": [teacher or POOL_TEACHER],
           "export": {"name": name}, **extra}
    (folder / "recipe.yaml").write_text(yaml.safe_dump(doc))
    return folder / "recipe.yaml"
