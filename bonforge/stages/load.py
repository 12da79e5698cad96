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
from bonforge.sources.problem_package import read_beside
from bonforge.sources.problems import LEFT_OUT_NO_ANSWER, load_problems
from bonforge.stage import Node, Params, Ref, Stage, unkeyed

VERSION = "5"  # 5: a bonforge-format spec from a table keeps its checker, limits and context (they were
# dropped); a table's memory limit is in the spec (it was in the metadata only, which the judge never read);
# one problem package's ../common in the key. 4: keyed by the source's content (a digest cached by stat), not
# its path, url and checksum: a file edited in place is a new input, and the same bytes under any path one
# input. 3: APPS call-based specs say their outputs are wrapped (wrapped_outputs); limits from the data checked
# (NaN, infinite, negative: the record's error) and capped at 600 s. 2: assert-style test specs carry the
# prompt as the check's context; tests from any table


def _beside(cfg: ProblemsConfig):
    """What the loader reads outside the source (one problem package's ``../common``), for the content key."""
    return read_beside if cfg.format == "problem_package" else None


def _load(_: pa.Table, cfg: ProblemsConfig, recipe_dir: Path, content: dict, drop: pa.Table | None = None) -> pa.Table:
    table = load_problems(cfg, data.resolve(cfg.source, recipe_dir), drop)
    data.unchanged(cfg.source, recipe_dir, content, _beside(cfg))
    return table


@dataclass(frozen=True)
class LoadParams(Params):
    cfg: ProblemsConfig
    recipe_dir: Path = unkeyed()
    content: dict = unkeyed()  # the source's content key (``data.content_key``), in the key in place of its path

    def key_config(self) -> dict:
        return data.keyed(self.cfg, self.content)


def _summary(written) -> dict:
    """Problems left out for a missing gold answer (``missing_answers: skip``), counted in the manifest."""
    n = sum(int(m.get(LEFT_OUT_NO_ANSWER.encode(), 0)) for m in written.shard_metadata())
    return {"left_out": {"no_gold_answer": n}} if n else {}


STAGE = Stage("problems", VERSION, params=LoadParams, schema=PROBLEMS, compute=_load, early=True, summary=_summary,
              context=lambda i: {"drop": i.read("contamination", ["problem_id"])} if "contamination" in i else {})


def node(recipe: Recipe, recipe_dir: Path, contamination: Ref | None = None) -> Node:
    """Without a contamination stage (``None``) the key is what it was before that stage existed."""
    content = data.content_key(recipe.problems.source, recipe_dir, _beside(recipe.problems))
    return STAGE.bind(LoadParams(recipe.problems, recipe_dir, content), {"contamination": contamination})
