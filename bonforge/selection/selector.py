"""The LLM selector of GenSelect: a model that reads a selection prompt (``bonforge.selection.prompts``) and answers
with the index of the best candidate. ``Selector`` answers a shard of prompts ``runs`` times with distinct
seeds and scores each answer against the prompt's label (SELECTOR_EVAL rows).

The judgment is the index after the *last* ``Judgment:`` of the final text; a missing or out-of-range index
is *unparsed*: it counts as wrong, and a seeded uniform pick over the prompt's candidates (seed: prompt id
and run) is recorded beside it as the fallback. With ``skip_unanimous`` a prompt whose candidates all carry
the same extracted answer (no missing ones) is not sent: candidate 0 is the pick, the row marked ``skipped``.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Annotated, Callable

import numpy as np
import pyarrow as pa
from pydantic import Field, TypeAdapter, ValidationError

from bonforge import identity
from bonforge.errors import ConfigError
from bonforge.judging.judgment import parse_judgment
from bonforge.keys import canonical_json
from bonforge.llm.base import Engine, EngineError, Request, consecutive, problem_seed, problem_seeds
from bonforge.config_model import load_yaml
from bonforge.llm.config import OpenAITeacher, SampledTeacher, TransformersTeacher, VLLMTeacher
from bonforge.llm.models import model_identity
from bonforge.llm.prices import completion_cost, token_cost
from bonforge.schema import SELECTOR_EVAL
from bonforge.stage import Rows, Written
from bonforge.tables.cost import cost_summary

_SPEC = re.compile(r"^(?P<engine>openai|transformers|vllm):(?P<model>[^@]+)(?:@(?P<url>\S+))?$")
_Config = TypeAdapter(Annotated[OpenAITeacher | TransformersTeacher | VLLMTeacher, Field(discriminator="engine")])


def selector_from_spec(spec: str) -> SampledTeacher:
    """``ENGINE:MODEL[@BASE_URL]`` (e.g. ``openai:Qwen3-4B@http://127.0.0.1:8000/v1``), or a YAML file
    holding a teacher config (``engine``, ``model``, sampling settings; ``name`` defaults to ``selector``).
    The config's ``n`` is not used: ``runs`` sets the samples per prompt."""
    if spec.endswith((".yaml", ".yml")):
        raw = load_yaml(Path(spec))
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
        return _Config.validate_python(raw)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise ConfigError(f"--selector {spec}: {problems}") from None


def selector_key(teacher: SampledTeacher) -> dict:
    cfg = teacher.key_config()
    cfg["model"] = model_identity(teacher.model, teacher.revision)
    for unused in ("n", "prompt_template", "name"):
        cfg.pop(unused, None)
    return cfg


def unanimous(groups: list[int]) -> bool:
    return bool(groups) and groups[0] >= 0 and all(g == groups[0] for g in groups)


ROW_VERSION = "1"  # what shapes a row besides the selector's settings and the prompt: bump it with _row


def selection_ids(shard: pa.Table, teacher: SampledTeacher, runs: int, skip_unanimous: bool) -> pa.Table:
    """The rows a shard of prompts gets (``bonforge.stage.Rows``): every run of every prompt, each with its
    identity (``identity.sample_ids``: the selector's settings and ``skip_unanimous``; as the prompt, the
    canonical JSON of the whole prompt row, label included; the run and its seed ``problem_seed + run``)."""
    settings = identity.settings("selection", {"version": ROW_VERSION, "selector": selector_key(teacher),
                                               "skip_unanimous": skip_unanimous})
    prompts = pa.array([canonical_json(p) for p in shard.to_pylist()], pa.string())
    prompt_ids = shard.column("prompt_id").combine_chunks()
    at = np.repeat(np.arange(len(prompts)), runs)
    run = np.tile(np.arange(runs, dtype=np.int32), len(prompts))
    seed = problem_seeds(teacher.seed, prompt_ids)[at] + run
    return pa.table({"prompt_id": prompt_ids.take(at), "run": run,
                     "problem_id": shard.column("problem_id").combine_chunks().take(at),
                     "row_id": identity.sample_ids(settings, prompts, at, run, seed)})


def rows(settings: Callable[[dict], tuple[SampledTeacher, int, bool]]) -> Rows:
    """Row reuse for a stage whose compute is a ``Selector``; ``settings(params)``: its teacher, runs and
    ``skip_unanimous``. A stored row of the same identity is taken as it is; only the missing runs are asked."""
    return Rows(("prompt_id", "run"), lambda shard, _context, params: selection_ids(shard, *settings(params)),
                tuple(n for n in SELECTOR_EVAL.names if n not in ("prompt_id", "run", "problem_id")), SELECTOR_EVAL,
                optional=("cost_usd",))


def spent(w: Written) -> dict:
    """What a ``Selector`` stage's calls cost (``bonforge.tables.cost``)."""
    return {"cost": cost_summary(w.each(["cost_usd"]), w.compute.spent_usd if w.compute is not None else 0.0)}


class Selector:
    """A shard of prompts → SELECTOR_EVAL rows, each with what its call cost at the selector's prices. Creates the
    engine on first use and keeps it; ``spent_usd``: what the calls it made cost."""

    def __init__(self, teacher: SampledTeacher, runs: int, skip_unanimous: bool, engine: Engine | None = None):
        self.teacher, self.runs, self.skip_unanimous, self.engine = teacher, runs, skip_unanimous, engine
        self.spent_usd = 0.0

    def __call__(self, shard: pa.Table, todo: pa.Table | None = None, progress=None) -> pa.Table:
        """Every run of every prompt, or with ``todo`` (``prompt_id``, ``run``: the rows still to compute)
        those only, asked as one request per run of consecutive missing runs (seed ``problem_seed + start``).
        ``progress(done, of)``: the selections answered of those asked, as they come (``Stage.reports``)."""
        prompts = shard.to_pylist()
        wanted: dict[str, list[int]] = {p["prompt_id"]: list(range(self.runs)) for p in prompts}
        if todo is not None:
            wanted = {pid: [] for pid in wanted}
            for pid, run in zip(todo.column("prompt_id").to_pylist(), todo.column("run").to_pylist()):
                wanted[pid].append(run)
        t = self.teacher
        planned = [(Request(id=p["prompt_id"], messages=({"role": "user", "content": p["prompt"]},), n=n,
                            temperature=t.temperature, top_p=t.top_p, max_tokens=t.max_tokens,
                            seed=problem_seed(t.seed, p["prompt_id"]) + start, stop=tuple(t.stop)), start)
                   for p in prompts if not (self.skip_unanimous and unanimous(p["answer_groups"]))
                   for start, n in consecutive(sorted(wanted[p["prompt_id"]]))]
        answers: dict[str, dict[int, object]] = {}
        if planned:
            if self.engine is None:
                from bonforge.llm import make_engine

                self.engine = make_engine(t)
            self.engine.start()
            asked = sum(r.n for r, _ in planned)
            told = None if progress is None else lambda k: progress(k, asked)
            results = self.engine.generate([r for r, _ in planned], told)
            if len(results) != len(planned):
                raise EngineError(f"selector {t.model}: engine returned {len(results)} results for "
                                  f"{len(planned)} requests")
            for (r, start), comps in zip(planned, results):
                answers.setdefault(r.id, {}).update({start + c.index: c for c in comps})
        rows = []
        for p in prompts:
            asked = not (self.skip_unanimous and unanimous(p["answer_groups"]))
            for run in sorted(wanted[p["prompt_id"]]):
                comp = answers.get(p["prompt_id"], {}).get(run)
                cost = completion_cost(t.prices, comp, t.gpus) if comp else token_cost(t.prices, 0, 0)
                rows.append({**_row(p, run, not asked, comp), "cost_usd": cost})
                self.spent_usd += cost or 0.0
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
