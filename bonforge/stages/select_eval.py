"""Stage `selector_eval`: a selector model (``bonforge.selection.selector``) answers selection prompts ``runs`` times
with distinct seeds; each answer is scored against the prompt's label.

Reads selection prompts with their answer groups (see ``prompt_table``: the build's GenSelect prompts, or
``pool_prompts``: one per problem over its whole pool), writes SELECTOR_EVAL (one row per prompt and run).
With ``skip_unanimous`` the rows of prompts not sent stay, marked ``skipped``, with the prompt's token count
as the compute saved. Row reuse (``selector.rows``): a (prompt, run) row whose identity a committed output
holds is taken from there; the selector is asked only for the missing runs (more ``runs``: only the new ones).

``summarize`` gives the GenSelect paper's Table 1 layout on the same prompts: pass@1 (a random candidate),
majority@N (a vote over the prompt's extracted answers, ties split), pass@N (an oracle pick), and the
selector's accuracy as mean ± population std over runs.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa

from bonforge.config import GenSelectConfig, Recipe
from bonforge.errors import DataError
from bonforge.llm.base import Engine
from bonforge.llm.config import SampledTeacher
from bonforge.selection.metrics import majority_at_k
from bonforge.selection.prompts import (SELECTION, UNRELIABLE, answer_groups, key_config, render_all, template_text,
                                        token_counter)
from bonforge.schema import SELECTOR_EVAL
from bonforge.selection import selector
from bonforge.selection.selector import Selector, selector_key
from bonforge.stage import Inputs, Node, Params, Ref, Stage, unkeyed

VERSION = "1"


def prompt_table(prompts: pa.Table, extracted: dict[str, str | None]) -> pa.Table:
    """GENSELECT rows → the stage's input: prompt_id, problem_id, prompt, n_candidates, correct_indices,
    n_tokens and the answer groups of the candidates (from their verdicts' ``extracted``)."""
    t = prompts.sort_by([("prompt_id", "ascending")])
    groups = []
    for pid, ids in zip(t.column("prompt_id").to_pylist(), t.column("candidate_ids").to_pylist()):
        missing = [c for c in ids if c not in extracted]
        if missing:
            raise DataError(f"candidate {missing[0]} has no verdict in this run", "genselect", pid, "candidate_ids")
        groups.append(answer_groups([extracted[c] for c in ids]))
    return t.select(SELECTION.names[:-1]).append_column("answer_groups", pa.array(groups, pa.list_(pa.int32())))


def pool_prompts(pool: pa.Table, cfg: GenSelectConfig, seed: int) -> pa.Table:
    """One selection prompt per problem over its whole pool, as at inference time (no pass-rate filter, no
    composition rule): the reliable candidates, at most ``max_candidates`` drawn by seeded sampling, in a
    seeded order. ``pool``: problem_id, question, domain, candidate_id, text, correct, status, extracted.
    Problems with fewer than ``min_candidates`` or prompts over ``max_tokens`` are left out."""
    template = template_text(cfg)
    count, _ = token_counter(cfg)
    by_problem: dict[str, list[dict]] = {}
    for r in pool.sort_by([("problem_id", "ascending"), ("candidate_id", "ascending")]).to_pylist():
        if r["status"] not in UNRELIABLE.get(r["domain"], set()) and (r["text"] or "").strip():
            by_problem.setdefault(r["problem_id"], []).append(r)
    drawn = {}
    for pid, cands in by_problem.items():
        rng = random.Random(f"{seed}/{pid}/pool")
        chosen = rng.sample(cands, min(len(cands), cfg.max_candidates))
        if len(chosen) >= cfg.min_candidates:
            drawn[pid] = chosen
    prompts = render_all(template, [c[0]["question"] for c in drawn.values()],
                         [[c["text"] for c in chosen] for chosen in drawn.values()])
    rows = []
    for (pid, chosen), prompt in zip(drawn.items(), prompts):
        n_tokens = count(prompt)
        if n_tokens > cfg.max_tokens:
            continue
        rows.append({"prompt_id": f"{pid}#pool", "problem_id": pid, "prompt": prompt, "n_candidates": len(chosen),
                     "correct_indices": [i for i, c in enumerate(chosen) if c["correct"]], "n_tokens": n_tokens,
                     "answer_groups": answer_groups([c["extracted"] for c in chosen])})
    return pa.Table.from_pylist(rows, schema=SELECTION)


_POOL = """
    SELECT c.problem_id, p.question, p.domain, c.candidate_id, c.text, v.correct, v.status, v.extracted
    FROM candidates c JOIN verdicts v USING (candidate_id) JOIN problems p ON p.problem_id = c.problem_id
"""


def _prompts(i: Inputs) -> pa.Table:
    p: SelectEvalParams = i.params
    if p.prompts == "genselect":
        verdicts = i.sql("SELECT candidate_id, extracted FROM verdicts")
        extracted = dict(zip(verdicts.column("candidate_id").to_pylist(), verdicts.column("extracted").to_pylist()))
        return prompt_table(i.sql("SELECT * FROM genselect"), extracted)
    return pool_prompts(i.sql(_POOL), p.genselect, p.seed)


@dataclass(frozen=True)
class SelectEvalParams(Params):
    """``prompts``: the build's GenSelect prompts (``genselect``) or one per problem over its whole pool
    (``pool``, drawn with ``genselect`` and ``seed``)."""

    teacher: SampledTeacher
    runs: int
    skip_unanimous: bool
    prompts: Literal["genselect", "pool"]
    genselect: GenSelectConfig
    seed: int
    engine: Engine | None = unkeyed(None)

    def key_config(self) -> dict:
        source = ({"source": "genselect"} if self.prompts == "genselect" else
                  {"source": "pool", "genselect": key_config(self.genselect, self.seed)})
        return {"selector": selector_key(self.teacher), "runs": self.runs, "skip_unanimous": self.skip_unanimous,
                "prompts": source}


READS = {"genselect": ("genselect", "verdicts"), "pool": ("problems", "candidates", "verdicts")}
STAGE = Stage("selector_eval", VERSION, params=SelectEvalParams, schema=SELECTOR_EVAL,
              open=lambda p: contextlib.closing(Selector(p.teacher, p.runs, p.skip_unanimous, p.engine)),
              table=_prompts, shard_rows=256, reports=True, summary=selector.spent,
              rows=selector.rows(lambda p: (p.teacher, p.runs, p.skip_unanimous)))


def node(recipe: Recipe, teacher: SampledTeacher, runs: int, skip_unanimous: bool,
         prompts: Literal["genselect", "pool"], base: dict[str, list[Ref]], engine: Engine | None = None) -> Node:
    """``teacher`` as a selector on a build's GenSelect prompts, or on one prompt per problem over its whole
    pool; ``base``: the build's outputs of the stages ``READS[prompts]``."""
    params = SelectEvalParams(teacher, runs, skip_unanimous, prompts, recipe.genselect, recipe.seed, engine)
    return STAGE.bind(params, {s: base[s] for s in READS[prompts]},
                      note={"selector": teacher.model, "engine": teacher.engine})


# -- Table 1 ----------------------------------------------------------------------------------------------
def summarize(table: pa.Table) -> dict:
    """Accuracies (fractions) on the evaluated prompts and the compute that skipping saved."""
    rows = table.to_pylist()
    first = {r["prompt_id"]: r for r in rows if r["run"] == 0}
    runs = sorted({r["run"] for r in rows})

    def per_run(field: str) -> list[float]:
        return [float(np.mean([r[field] for r in rows if r["run"] == k])) for k in runs]

    strict, fallback = per_run("correct"), per_run("fallback_correct")
    majority = []
    for r in first.values():
        answers = [str(g) if g >= 0 else None for g in r["answer_groups"]]
        flags = [i in set(r["correct_indices"]) for i in range(r["n_candidates"])]
        majority.append(majority_at_k(answers, flags, r["n_candidates"], r["prompt_id"]) or 0.0)
    sent = [r for r in rows if not r["skipped"]]
    total_tokens = sum(r["prompt_n_tokens"] for r in rows)
    skipped_tokens = sum(r["prompt_n_tokens"] for r in rows if r["skipped"])
    return {
        "prompts": len(first), "runs": len(runs),
        "pass@1": float(np.mean([len(r["correct_indices"]) / r["n_candidates"] for r in first.values()])),
        "majority@N": float(np.mean(majority)),
        "pass@N": float(np.mean([bool(r["correct_indices"]) for r in first.values()])),
        "selector": float(np.mean(strict)), "selector_std": float(np.std(strict)),
        "selector_fallback": float(np.mean(fallback)), "selector_fallback_std": float(np.std(fallback)),
        "unparsed": sum(not r["parsed"] for r in sent), "calls": len(sent),
        "skipped_prompts": sum(r["skipped"] for r in first.values()),
        "skipped_calls": len(rows) - len(sent),
        "prompt_tokens_saved": skipped_tokens,
        "compute_saved": skipped_tokens / total_tokens if total_tokens else 0.0,
        "completion_tokens": sum(r["completion_tokens"] or 0 for r in sent),
    }
