"""Stage ``verdicts``: one per candidates stage, by math-verify (``verify_math``) or in the code sandbox
(``verify_code``), chosen by the problems' domain. Shards of 256 candidates run as Ray tasks; readers get
files of 100,000 verdicts."""

from __future__ import annotations

import pyarrow as pa

from bonforge.config import Recipe
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.schema import VERDICTS
from bonforge.stage import Node, Ref, Stage
from bonforge.judging import code as verify_code
from bonforge.judging import math as verify_math


def _verify_code(candidates: pa.Table, problems: pa.Table, cfg: CodeVerifyConfig) -> pa.Table:
    """Inside Ray: the node's shared sandbox pool (one per node for all workers); else this process's."""
    from bonforge.sandbox.ray_pool import pool_for

    return verify_code.verify_code(problems, candidates, cfg, pool=pool_for(cfg))


_SHARDS = dict(executor="ray", shard_rows=256, compact_rows=100_000, table=lambda i: i.read("candidates"),
               context=lambda i: {"problems": i.read("problems")})
MATH = Stage("verdicts", verify_math.VERSION, schema=VERDICTS, compute=verify_math.verify_math, **_SHARDS)
CODE = Stage("verdicts", verify_code.VERSION, schema=VERDICTS, compute=_verify_code, **_SHARDS)


def node(recipe: Recipe, problems: Ref, candidates: Ref, domains: set[str]) -> Node:
    """The verdicts of one candidates stage; ``domains``: those of the problems."""
    stage, cfg = (CODE, recipe.verify.code) if domains == {"code"} else (MATH, recipe.verify.math)
    teacher = candidates.manifest.get("teacher", "")
    return stage.bind(cfg.key_config(), {"problems": problems, "candidates": candidates},
                      label=f"verdicts[{teacher}]", params={"cfg": cfg}, note={"teacher": teacher})
