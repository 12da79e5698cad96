"""Stage `problems`: load a problem set into the PROBLEMS table (``bonforge.sources.problems``). With a
``decontaminate`` section the problems that the ``contamination`` stage dropped are left out (their ids stay
as loaded).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from bonforge.sources import data
from bonforge.config import ProblemsConfig, Recipe
from bonforge.schema import PROBLEMS
from bonforge.sources.problems import load_problems
from bonforge.stage import Node, Params, Ref, Stage, unkeyed, whole_key

VERSION = "3"  # 3: APPS call-based specs say their outputs are wrapped (wrapped_outputs); limits from the data
# checked (NaN, infinite, negative: the record's error) and capped at 600 s. 2: assert-style test specs
# carry the prompt as the check's context; tests from any table


def _load(_: pa.Table, cfg: ProblemsConfig, recipe_dir: Path, drop: pa.Table | None = None) -> pa.Table:
    return load_problems(cfg, data.resolve(cfg.source, recipe_dir), drop)


@dataclass(frozen=True)
class LoadParams(Params):
    cfg: ProblemsConfig = whole_key()
    recipe_dir: Path = unkeyed()


STAGE = Stage("problems", VERSION, params=LoadParams, schema=PROBLEMS, compute=_load, early=True,
              context=lambda i: {"drop": i.read("contamination", ["problem_id"])} if "contamination" in i else {})


def node(recipe: Recipe, recipe_dir: Path, contamination: Ref | None = None) -> Node:
    """Without a contamination stage (``None``) the key is what it was before that stage existed."""
    return STAGE.bind(LoadParams(recipe.problems, recipe_dir), {"contamination": contamination})
