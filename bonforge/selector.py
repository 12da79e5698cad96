"""The LLM selector of GenSelect: a model that reads a selection prompt (``bonforge.prompts``) and answers
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
from typing import Annotated

import pyarrow as pa
import yaml
from pydantic import Field, TypeAdapter, ValidationError

from bonforge.errors import ConfigError
from bonforge.judging.judgment import parse_judgment
from bonforge.llm.base import Engine, EngineError, Request, problem_seed
from bonforge.llm.config import OpenAITeacher, SampledTeacher, TransformersTeacher, VLLMTeacher
from bonforge.llm.models import model_identity
from bonforge.schema import SELECTOR_EVAL

_SPEC = re.compile(r"^(?P<engine>openai|transformers|vllm):(?P<model>[^@]+)(?:@(?P<url>\S+))?$")
_Config = TypeAdapter(Annotated[OpenAITeacher | TransformersTeacher | VLLMTeacher, Field(discriminator="engine")])


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


class Selector:
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
