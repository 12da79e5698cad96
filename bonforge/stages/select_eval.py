"""Stage `selector_eval`: a selector model answers selection prompts ``runs`` times with distinct seeds;
each answer is scored against the prompt's label.

Reads selection prompts with their answer groups (see ``prompt_table``), writes SELECTOR_EVAL (one row per
prompt and run). The judgment is the index after the *last* ``Judgment:`` of the final text; a missing or
out-of-range index is *unparsed*: it counts as wrong, and a seeded uniform pick over the prompt's
candidates (seed: prompt id and run) is recorded beside it as the fallback.

Skip when unanimous: a prompt whose candidates all carry the same extracted answer (no missing ones) is
not sent; every candidate is then equally right or wrong, so candidate 0 is the pick. The rows stay, marked
``skipped``, with the prompt's token count as the compute saved.

``summarize`` gives the GenSelect paper's Table 1 layout on the same prompts: pass@1 (a random candidate),
majority@N (a vote over the prompt's extracted answers, ties split), pass@N (an oracle pick), and the
selector's accuracy as mean ± population std over runs.
"""

from __future__ import annotations

import contextlib
import random
import re
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pyarrow as pa
import yaml
from pydantic import Field, TypeAdapter, ValidationError

from bonforge.config import GenSelectConfig, Recipe
from bonforge.errors import ConfigError, DataError
from bonforge.judging.judgment import parse_judgment
from bonforge.llm.base import Engine, EngineError, Request
from bonforge.llm.config import OpenAITeacher, SampledTeacher, TransformersTeacher, VLLMTeacher
from bonforge.schema import SELECTOR_EVAL
from bonforge.stage import Inputs, Node, Ref, Stage
from bonforge.stages import assemble
from bonforge.stages.sample import model_identity, problem_seed
from bonforge.stages.score import majority_at_k

VERSION = "1"
_SPEC = re.compile(r"^(?P<engine>openai|transformers|vllm):(?P<model>[^@]+)(?:@(?P<url>\S+))?$")
_Selector = TypeAdapter(Annotated[OpenAITeacher | TransformersTeacher | VLLMTeacher, Field(discriminator="engine")])


# -- the selector ----------------------------------------------------------------------------------------
def selector_from_spec(spec: str) -> SampledTeacher:
    """``ENGINE:MODEL[@BASE_URL]`` (e.g. ``openai:Qwen3-4B@http://127.0.0.1:8000/v1``), or a YAML file
    holding a teacher config (``engine``, ``model``, sampling settings; ``name`` defaults to ``selector``).
    The config's ``n`` is not used: ``runs`` sets the samples per prompt."""
    if spec.endswith((".yaml", ".yml")):
        path = Path(spec)
        try:
            raw = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"--selector {spec}: cannot read a YAML mapping: {e}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"--selector {spec}: expected a YAML mapping, got {type(raw).__name__}")
        raw.setdefault("name", "selector")
    else:
        m = _SPEC.match(spec)
        if not m:
            raise ConfigError(f"--selector {spec!r}: expected ENGINE:MODEL[@BASE_URL] with ENGINE openai, "
                              "transformers or vllm, or a .yaml file")
        raw = {"engine": m["engine"], "name": "selector", "model": m["model"]}
        if m["url"]:
            if m["engine"] != "openai":
                raise ConfigError(f"--selector {spec!r}: @BASE_URL applies to the openai engine only")
            raw["base_url"] = m["url"]
    try:
        return _Selector.validate_python(raw)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise ConfigError(f"--selector {spec}: {problems}") from None


def selector_key(teacher: SampledTeacher) -> dict:
    cfg = teacher.key_config()
    cfg["model"] = model_identity(teacher.model, teacher.revision)
    for unused in ("n", "prompt_template", "name"):
        cfg.pop(unused, None)
    return cfg


# -- prompts ----------------------------------------------------------------------------------------------
def answer_groups(answers: list[str | None]) -> list[int]:
    """Group labels in order of first appearance; -1 for a candidate without an answer."""
    labels: dict[str, int] = {}
    return [-1 if a is None else labels.setdefault(a, len(labels)) for a in answers]


def unanimous(groups: list[int]) -> bool:
    return bool(groups) and groups[0] >= 0 and all(g == groups[0] for g in groups)


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
    cols = ["prompt_id", "problem_id", "prompt", "n_candidates", "correct_indices", "n_tokens"]
    return t.select(cols).append_column("answer_groups", pa.array(groups, pa.list_(pa.int32())))


def pool_prompts(pool: pa.Table, cfg: GenSelectConfig, seed: int) -> pa.Table:
    """One selection prompt per problem over its whole pool, as at inference time (no pass-rate filter, no
    composition rule): the reliable candidates, at most ``max_candidates`` drawn by seeded sampling, in a
    seeded order. ``pool``: problem_id, question, domain, candidate_id, text, correct, status, extracted.
    Problems with fewer than ``min_candidates`` or prompts over ``max_tokens`` are left out."""
    template = assemble.template_text(cfg)
    count, _ = assemble.token_counter(cfg)
    by_problem: dict[str, list[dict]] = {}
    for r in pool.sort_by([("problem_id", "ascending"), ("candidate_id", "ascending")]).to_pylist():
        if r["status"] not in assemble.UNRELIABLE.get(r["domain"], set()) and (r["text"] or "").strip():
            by_problem.setdefault(r["problem_id"], []).append(r)
    drawn = {}
    for pid, cands in by_problem.items():
        rng = random.Random(f"{seed}/{pid}/pool")
        chosen = rng.sample(cands, min(len(cands), cfg.max_candidates))
        if len(chosen) >= cfg.min_candidates:
            drawn[pid] = chosen
    prompts = assemble.render_all(template, [c[0]["question"] for c in drawn.values()],
                                  [[c["text"] for c in chosen] for chosen in drawn.values()])
    rows = []
    for (pid, chosen), prompt in zip(drawn.items(), prompts):
        n_tokens = count(prompt)
        if n_tokens > cfg.max_tokens:
            continue
        rows.append({"prompt_id": f"{pid}#pool", "problem_id": pid, "prompt": prompt, "n_candidates": len(chosen),
                     "correct_indices": [i for i, c in enumerate(chosen) if c["correct"]], "n_tokens": n_tokens,
                     "answer_groups": answer_groups([c["extracted"] for c in chosen])})
    schema = pa.schema([("prompt_id", pa.string()), ("problem_id", pa.string()), ("prompt", pa.string()),
                        ("n_candidates", pa.int32()), ("correct_indices", pa.list_(pa.int32())),
                        ("n_tokens", pa.int32()), ("answer_groups", pa.list_(pa.int32()))])
    return pa.Table.from_pylist(rows, schema=schema)


# -- the stage's compute ----------------------------------------------------------------------------------
class Judge:
    """A shard of prompts → SELECTOR_EVAL rows. Creates the engine on first use and keeps it."""

    def __init__(self, teacher: SampledTeacher, runs: int, skip_unanimous: bool, engine: Engine | None = None):
        self.teacher, self.runs, self.skip_unanimous, self.engine = teacher, runs, skip_unanimous, engine

    def __call__(self, shard: pa.Table) -> pa.Table:
        prompts = shard.to_pylist()
        ask = [p for p in prompts if not (self.skip_unanimous and unanimous(p["answer_groups"]))]
        t = self.teacher
        requests = [Request(id=p["prompt_id"], messages=({"role": "user", "content": p["prompt"]},), n=self.runs,
                            temperature=t.temperature, top_p=t.top_p, max_tokens=t.max_tokens,
                            seed=problem_seed(t.seed, p["prompt_id"]), stop=tuple(t.stop)) for p in ask]
        answers: dict[str, list] = {}
        if requests:
            if self.engine is None:
                from bonforge.llm import make_engine

                self.engine = make_engine(t)
            self.engine.start()
            results = self.engine.generate(requests)
            if len(results) != len(requests):
                raise EngineError(f"selector {t.model}: engine returned {len(results)} results for "
                                  f"{len(requests)} prompts")
            answers = {r.id: comps for r, comps in zip(requests, results)}
        rows = []
        for p in prompts:
            comps = {c.index: c for c in answers.get(p["prompt_id"], [])}
            for run in range(self.runs):
                rows.append(_row(p, run, p["prompt_id"] not in answers, comps.get(run)))
        return pa.Table.from_pylist(rows, schema=SELECTOR_EVAL)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None


def _row(p: dict, run: int, skipped: bool, comp) -> dict:
    n, correct = p["n_candidates"], set(p["correct_indices"])
    judgment = 0 if skipped else parse_judgment(comp.text if comp else None, n)
    fallback = judgment if judgment is not None else random.Random(f"{p['prompt_id']}/{run}").randrange(n)
    return {
        "prompt_id": p["prompt_id"], "problem_id": p["problem_id"], "run": run,
        "seed": comp.seed if comp else None, "n_candidates": n, "correct_indices": p["correct_indices"],
        "answer_groups": p["answer_groups"], "skipped": skipped,
        "judgment": None if skipped else judgment, "parsed": judgment is not None,
        "correct": judgment in correct, "fallback_index": fallback, "fallback_correct": fallback in correct,
        "prompt_n_tokens": p["n_tokens"],
        "prompt_tokens": comp.prompt_tokens if comp else None,
        "completion_tokens": comp.completion_tokens if comp else None,
        "finish_reason": comp.finish_reason if comp else None,
        "response": comp.text[-2000:] if comp else None,
    }


_POOL = """
    SELECT c.problem_id, p.question, p.domain, c.candidate_id, c.text, v.correct, v.status, v.extracted
    FROM candidates c JOIN verdicts v USING (candidate_id) JOIN problems p ON p.problem_id = c.problem_id
"""


def _prompts(i: Inputs) -> pa.Table:
    if i.params["prompts"] == "genselect":
        verdicts = i.sql("SELECT candidate_id, extracted FROM verdicts")
        extracted = dict(zip(verdicts.column("candidate_id").to_pylist(), verdicts.column("extracted").to_pylist()))
        return prompt_table(i.sql("SELECT * FROM genselect"), extracted)
    return pool_prompts(i.sql(_POOL), i.params["genselect"], i.params["seed"])


READS = {"genselect": ("genselect", "verdicts"), "pool": ("problems", "candidates", "verdicts")}
STAGE = Stage("selector_eval", VERSION, schema=SELECTOR_EVAL,
              open=lambda p: contextlib.closing(Judge(p["teacher"], p["runs"],
              p["skip_unanimous"], p["engine"])), table=_prompts, shard_rows=256)  # fmt: skip


def node(recipe: Recipe, teacher: SampledTeacher, runs: int, skip_unanimous: bool,
         prompts: Literal["genselect", "pool"], base: dict[str, list[Ref]], engine: Engine | None = None) -> Node:
    """``teacher`` as a selector on a build's GenSelect prompts, or on one prompt per problem over its whole
    pool; ``base``: the build's outputs of the stages ``READS[prompts]``."""
    prompt_cfg = ({"source": "genselect"} if prompts == "genselect" else
                  {"source": "pool", "genselect": assemble.key_config(recipe.genselect, recipe.seed)})
    upstream = {s: base[s] for s in READS[prompts]}
    cfg = {"selector": selector_key(teacher), "runs": runs, "skip_unanimous": skip_unanimous, "prompts": prompt_cfg}
    return STAGE.bind(cfg, upstream, note={"selector": teacher.model, "engine": teacher.engine},
                      params={"teacher": teacher, "runs": runs, "skip_unanimous": skip_unanimous, "engine": engine,
                              "prompts": prompts, "genselect": recipe.genselect, "seed": recipe.seed})


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
