"""Stage ``verdicts``: one per candidates stage, by math-verify (``verify_math``) or in the code sandbox
(``verify_code``), chosen by the problems' domain. Shards of 256 candidates run as Ray tasks; readers get
files of 100,000 verdicts.

A verdict's content identity (``bonforge.identity``) is the verification settings, the problem's domain, its
gold answer (math) or test spec and question (code: what extraction and the judge read) and the candidate's
text: a verdict on the same text under the same settings is taken from the store, not judged again."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from bonforge import identity
from bonforge.config import Recipe
from bonforge.judging import code as verify_code
from bonforge.judging import math as verify_math
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.schema import VERDICTS
from bonforge.stage import Node, Ref, Rows, Stage


def _only(candidates: pa.Table, todo: pa.Table | None) -> pa.Table:
    """The candidates still to judge (all of them without ``todo``)."""
    if todo is None:
        return candidates
    return candidates.filter(pc.is_in(candidates.column("candidate_id"), value_set=todo.column("candidate_id")))


def _verify_math(candidates: pa.Table, problems: pa.Table, cfg, todo: pa.Table | None = None) -> pa.Table:
    return verify_math.verify_math(_only(candidates, todo), problems, cfg)


def _verify_code(candidates: pa.Table, problems: pa.Table, cfg: CodeVerifyConfig,
                 todo: pa.Table | None = None) -> pa.Table:
    """Inside Ray: the node's shared sandbox pool (one per node for all workers); else this process's."""
    from bonforge.sandbox.ray_pool import pool_for

    return verify_code.verify_code(problems, _only(candidates, todo), cfg, pool=pool_for(cfg))


def _rows(kind: str, version: str) -> Rows:
    def ids(candidates: pa.Table, context: dict, params: dict) -> pa.Table:
        digest = identity.settings("verdict", {"kind": kind, "version": version, "cfg": params["cfg"].key_config()})
        problems = context["problems"].select(["problem_id", "domain", "question", "answer", "tests"]).to_pylist()
        by_pid = {p["problem_id"]: p for p in problems}
        cands = candidates.select(["candidate_id", "problem_id", "teacher", "text"]).to_pylist()
        groups: dict[str, list[int]] = {}
        for i, c in enumerate(cands):
            groups.setdefault(c["problem_id"], []).append(i)
        row_ids: list[bytes] = [b""] * len(cands)
        for pid, members in groups.items():
            p = by_pid.get(pid)
            if p is None or (kind == "math" and p["answer"] is None):
                domain, gold = "", json.dumps({"no_gold_for": pid})  # its verdict names the problem
            elif kind == "math":
                domain, gold = p["domain"] or "math", p["answer"]
            else:
                domain, gold = p["domain"] or "code", json.dumps([p["tests"], p["question"]])
            for i, rid in zip(members, identity.verdict_ids(digest, domain, gold, [cands[i]["text"] for i in members])):
                row_ids[i] = rid
        return pa.table({"candidate_id": candidates.column("candidate_id"),
                         "row_id": pa.array(row_ids, pa.binary(identity.SIZE)),
                         "problem_id": candidates.column("problem_id"), "teacher": candidates.column("teacher")})

    return Rows("candidate_id", ids, ("extracted", "correct", "reward", "status", "tests_passed", "tests_total",
                                      "detail", "latency_ms"), VERDICTS)


_SHARDS = dict(executor="ray", shard_rows=256, compact_rows=100_000, table=lambda i: i.read("candidates"),
               context=lambda i: {"problems": i.read("problems")})
MATH = Stage("verdicts", verify_math.VERSION, compute=_verify_math, rows=_rows("math", verify_math.VERSION), **_SHARDS)
CODE = Stage("verdicts", verify_code.VERSION, compute=_verify_code, rows=_rows("code", verify_code.VERSION), **_SHARDS)


def node(recipe: Recipe, problems: Ref, candidates: Ref, domains: set[str]) -> Node:
    """The verdicts of one candidates stage; ``domains``: those of the problems."""
    stage, cfg = (CODE, recipe.verify.code) if domains == {"code"} else (MATH, recipe.verify.math)
    teacher = candidates.manifest.get("teacher", "")
    return stage.bind(cfg.key_config(), {"problems": problems, "candidates": candidates},
                      label=f"verdicts[{teacher}]", params={"cfg": cfg}, note={"teacher": teacher})
