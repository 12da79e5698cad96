"""``bonforge plan``: what a build of a recipe would ask its sampling teachers for and what that may cost, before
anything is spent (docs/cost.md). It loads the problems, renders every prompt and looks every sample's identity
up in the store (row reuse), and calls no model endpoint.

Per sampled teacher: the samples the build holds and those it would request (the others are reused); their
prompt tokens, counted by the model's own tokenizer when the teacher's model is a local directory, else estimated
(``CHARS_PER_TOKEN``, plus ``MESSAGE_TOKENS`` for the chat template) and, where the store holds answers of the
same teacher settings, scaled by what the endpoint reported for their prompts; output tokens at the shortest,
mean and longest lengths those answers had, and at worst ``max_tokens`` each. The cost range is prompts plus the
shortest outputs to prompts plus ``max_tokens`` outputs; ``expected`` uses the observed mean. What reuse saves
is what the reused rows cost when they were made.

Early stopping draws fewer samples than planned (the plan is the most it draws); judges, selectors and fusors
read what sampling produces, so their calls are not planned.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bonforge.config import PoolTeacher, Recipe
from bonforge.engine import reuse
from bonforge.llm.prices import token_cost
from bonforge.sources import data
from bonforge.sources.problems import load_problems
from bonforge.stages import sample
from bonforge.storage.store import StageStore

CHARS_PER_TOKEN = 4.0  # the estimate without a tokenizer: about 4 characters a token in English text
MESSAGE_TOKENS = 4  # a chat template's tokens around one message


def plan(recipe: Recipe, recipe_dir: Path, store: StageStore) -> dict:
    """The plan of a build of ``recipe`` against ``store`` (module docstring)."""
    problems = load_problems(recipe.problems, data.resolve(recipe.problems.source, recipe_dir))
    problems = problems.select(["problem_id", "domain", "question"])
    teachers = [teacher_plan(t, problems, store) for t in recipe.teachers if not isinstance(t, PoolTeacher)]
    total = {k: sum(t[k] or 0.0 for t in teachers) if any(t[k] is not None for t in teachers) else None
             for k in ("low_usd", "expected_usd", "high_usd", "saved_usd")}
    unpriced = [t["teacher"] for t in teachers if t["high_usd"] is None and t["requests"]]  # not in the total
    return {"recipe": recipe.name, "problems": problems.num_rows, "teachers": teachers, **total,
            "unpriced_teachers": unpriced}


def teacher_plan(teacher, problems: pa.Table, store: StageStore) -> dict:
    ids = sample._ids(problems, {}, sample.SampleParams(teacher))
    found, stored = reuse.find(store, "candidates", sample.ROWS, ids.column("row_id"))
    rendered = sample.rendered_prompts(problems, teacher, {})
    counted, how = prompt_tokens(teacher, rendered.to_pylist())
    per_row = np.asarray(counted, np.float64)[_problem_index(problems, ids)]
    seen = observed(store, teacher)
    if how == "estimate" and seen["prompt_ratio"]:
        per_row, how = per_row * seen["prompt_ratio"], "estimate, scaled by the prompts the store holds answers to"
    todo = ~found
    n, prompt = int(todo.sum()), float(per_row[todo].sum())
    p, most = teacher.prices, teacher.max_tokens
    cost = lambda out: token_cost(p, round(prompt), round(out))  # noqa: E731
    out = {"teacher": teacher.name, "engine": teacher.engine, "rows": ids.num_rows, "reused": int(found.sum()),
           "requests": n, "prompt_tokens": round(prompt), "prompt_tokens_counted_by": how,
           "output_tokens": {"observed_min": seen["min"], "observed_mean": seen["mean"], "observed_max": seen["max"],
                             "max_tokens": most},
           "low_usd": cost(n * (seen["min"] if seen["min"] is not None else 0)),
           "expected_usd": cost(n * seen["mean"]) if seen["mean"] is not None else None,
           "high_usd": cost(n * most)}
    saved = stored.column("cost_usd")  # unknown where a reused row has no cost; nothing reused saves nothing
    out["saved_usd"] = None if saved.null_count else pc.sum(saved).as_py() or 0.0
    return out


def _problem_index(problems: pa.Table, ids: pa.Table) -> np.ndarray:
    """For each planned row, the position of its problem in ``problems``."""
    at = {pid: i for i, pid in enumerate(problems.column("problem_id").to_pylist())}
    return np.array([at[pid] for pid in ids.column("problem_id").to_pylist()], np.int64)


def prompt_tokens(teacher, prompts: list[str], estimate: bool = False) -> tuple[list[float], str]:
    """Each prompt's tokens as the teacher's endpoint would count them, and how they were counted (``estimate``:
    never by a tokenizer)."""
    tokenizer = None if estimate else _tokenizer(teacher.model)
    if tokenizer is not None:
        messages = [[{"role": "user", "content": p}] for p in prompts]
        try:
            return [float(len(tokenizer.apply_chat_template(m, tokenize=True, add_generation_prompt=True,
                                                            return_dict=False))) for m in messages], "tokenizer"
        except (ValueError, TypeError):  # no chat template: the text alone
            return [float(len(tokenizer(p, add_special_tokens=False)["input_ids"])) for p in prompts], "tokenizer"
    return [len(p) / CHARS_PER_TOKEN + MESSAGE_TOKENS for p in prompts], "estimate"


def _tokenizer(model: str):
    """The tokenizer of a local model directory, when transformers can read one there (else None)."""
    if not Path(model).is_dir():
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model)
    except (ImportError, OSError, ValueError):
        return None


def observed(store: StageStore, teacher) -> dict:
    """The output lengths (shortest, mean, longest) of the answers the store holds from the same teacher
    settings, and the ratio of the prompt tokens the endpoint reported to the estimate of those prompts."""
    settings = sample.sample_settings(teacher)
    lengths, reported, estimated = [], 0.0, 0.0
    for key in store.loc.names(store.loc.path("stages", "candidates")):
        man = store.manifest("candidates", key) if store.exists("candidates", key) else None
        config = man.config if man is not None and isinstance(man.config, dict) else {}
        if {k: v for k, v in config.items() if k not in ("name", "n", "prompt_template")} != {
                k: v for k, v in settings.items() if k != "version"}:
            continue
        t = store.read("candidates", key, ["problem_id", "prompt_tokens", "completion_tokens"])
        lengths += [n for n in t.column("completion_tokens").to_pylist() if n is not None]
        reported += pc.sum(t.column("prompt_tokens")).as_py() or 0
        estimated += _estimate_of(store, man, teacher, t)
    if not lengths:
        return {"min": None, "mean": None, "max": None, "prompt_ratio": None}
    return {"min": min(lengths), "mean": round(float(np.mean(lengths)), 1), "max": max(lengths),
            "prompt_ratio": reported / estimated if reported and estimated else None}


def _estimate_of(store: StageStore, man, teacher, t: pa.Table) -> float:
    """The estimate (``prompt_tokens``) of the prompts of the rows ``t`` of a candidates output whose endpoint
    reported their prompt tokens, rendered from its problems input; 0 where that input is gone."""
    problems_key = man.upstream.get("problems")
    if not problems_key or "," in problems_key or not store.exists("problems", problems_key):
        return 0.0
    problems = store.read("problems", problems_key, ["problem_id", "domain", "question"])
    counted, _ = prompt_tokens(teacher, sample.rendered_prompts(problems, teacher, {}).to_pylist(), estimate=True)
    tokens = dict(zip(problems.column("problem_id").to_pylist(), counted))
    rows = t.filter(pc.is_valid(t.column("prompt_tokens"))).column("problem_id").to_pylist()
    return float(sum(tokens.get(pid, 0.0) for pid in rows))


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.4f}"


def _range(p: dict) -> str:
    if p["high_usd"] is None:
        return "unknown (no prices stated)"
    expected = f" (expected {_usd(p['expected_usd'])})" if p["expected_usd"] is not None else ""
    return f"{_usd(p['low_usd'])} to {_usd(p['high_usd'])}{expected}; reuse saves {_usd(p['saved_usd'])}"


def plan_lines(p: dict) -> list[str]:
    """The plan in words: a line per teacher and its cost, then the total."""
    lines = [f"plan of {p['recipe']}: {p['problems']} problems (no endpoint called)"]
    for t in p["teachers"]:
        out = t["output_tokens"]
        seen = (f"observed {out['observed_min']} to {out['observed_max']} (mean {out['observed_mean']}), "
                if out["observed_mean"] is not None else "none observed yet, ")
        lines += [f"teacher {t['teacher']} ({t['engine']}): {t['rows']} samples, {t['reused']} reused, "
                  f"{t['requests']} to request; {t['prompt_tokens']:,} prompt tokens "
                  f"({t['prompt_tokens_counted_by']}); output tokens per sample: {seen}at most {out['max_tokens']}",
                  f"  cost: {_range(t)}"]
    left_out = f"; not counted: {', '.join(p['unpriced_teachers'])} (no prices stated)" if p["unpriced_teachers"] \
        else ""
    lines.append(f"total: {_range(p)}{left_out}")
    return lines
