"""Trainer formats of the published datasets, and what each trainer needs to use them (``trainers``).

GenSelect dataset:

* ``verl``: verl's RL parquet — ``data_source``, ``prompt`` (chat messages), ``ability``,
  ``reward_model {style: "rule", ground_truth}``, ``extra_info``. ``ground_truth`` is the JSON list of
  correct candidate indices, scored by ``bonforge.rewards.genselect``. TRL's GRPOTrainer loads the same
  file.
* ``plain``: the genselect table as stored (one row per prompt).

RL dataset (``export.rl``): the kept problems themselves.

* ``rl``: the same verl layout, one row per kept problem, the prompt rendered with the sampling template;
  ``ground_truth`` is the gold final answer (math: read out of the stored gold as the maths judge reads it,
  ``bonforge.judging.math_rules.gold_answer``: GSM8K's text after ``####``, MATH's last box) or the JSON test
  spec (code); ``extra_info.solution`` keeps the gold as stored (a worked solution, or a reference program);
  ``extra_info.verify`` holds the recipe's checking settings so that ``bonforge.rewards.math`` / ``.code``
  check exactly as the verdicts stage did.
* ``candidates``: the kept problems' candidates with their verdicts (``reward`` = the fraction of tests
  passed for code), joinable with ``bonforge maxk`` weights by ``candidate_id`` for off-policy best-of-N;
  where the build holds trajectories, a ``messages`` column with each one as stored (JSON, null for a plain
  answer).
"""

from __future__ import annotations

import json
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bonforge.tables.ordering import sort_by
from bonforge.errors import DataError
from bonforge.judging.math_rules import gold_answer
from bonforge.schema import NO_LABEL, REFERENCE_TEACHER
from bonforge.tables import trajectories
from bonforge.templates import render

MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
REWARD_MODEL = pa.struct([("style", pa.string()), ("ground_truth", pa.string())])


def verl_schema(extra_info: list[tuple[str, pa.DataType]]) -> pa.Schema:
    """verl's RL layout with the given ``extra_info`` fields."""
    return pa.schema([("data_source", pa.string()), ("prompt", MESSAGES), ("ability", pa.string()),
                      ("reward_model", REWARD_MODEL), ("extra_info", pa.struct(extra_info))])  # fmt: skip


VERL_SCHEMA = verl_schema([("prompt_id", pa.string()), ("problem_id", pa.string()), ("index", pa.int32()),
                           ("candidate_ids", pa.list_(pa.string())), ("n_candidates", pa.int32())])  # fmt: skip


ORDER = [("problem_id", "ascending"), ("prompt_index", "ascending")]


def _col(t: pa.Table, name: str) -> pa.Array:
    return t.column(name).combine_chunks()


def _const(value: str, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, pa.string()), n)


def to_verl(genselect: pa.Table, data_source: str, start: int = 0) -> pa.Table:
    """verl rows in (problem_id, prompt_index) order; ``extra_info.index`` counts from ``start``.
    Built column by column in Arrow: no Python object per row."""
    t = to_plain(genselect)
    n = t.num_rows
    message, reward, extra = (VERL_SCHEMA.field(f).type for f in ("prompt", "reward_model", "extra_info"))
    messages = pa.StructArray.from_arrays([_const("user", n), _col(t, "prompt")], fields=list(message.value_type))
    truth = pc.binary_join_element_wise(
        "[", pc.binary_join(_col(t, "correct_indices").cast(pa.list_(pa.string())), ", "), "]", ""
    )
    columns = [
        _const(data_source, n),
        pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), messages, type=message),
        _const("genselect", n),
        pa.StructArray.from_arrays([_const("rule", n), truth], fields=list(reward)),
        pa.StructArray.from_arrays(
            [
                _col(t, "prompt_id"),
                _col(t, "problem_id"),
                pa.array(np.arange(start, start + n, dtype=np.int32)),
                _col(t, "candidate_ids"),
                _col(t, "n_candidates"),
            ],
            fields=list(extra),
        ),
    ]
    return pa.Table.from_arrays(columns, schema=VERL_SCHEMA)


def to_plain(genselect: pa.Table) -> pa.Table:
    """The genselect rows in (problem_id, prompt_index) order (as the stage writes them: then untouched)."""
    return sort_by(genselect, [k for k, _ in ORDER])


def formats(genselect: pa.Table, names: list[str], data_source: str, start: int = 0) -> dict[str, pa.Table]:
    return {name: to_verl(genselect, data_source, start) if name == "verl" else to_plain(genselect) for name in names}


def stream(shards: Iterable[pa.Table], names: list[str], data_source: str) -> Iterator[dict[str, pa.Table]]:
    """``formats`` of each genselect shard in turn (shards hold whole problems in problem_id order, so the
    concatenation is in (problem_id, prompt_index) order): one shard at a time."""
    start, last = 0, None
    for shard in shards:
        shard = to_plain(shard)  # then formats() finds it in order
        if shard.num_rows:
            first, last_row = (_order_key(shard, i) for i in (0, shard.num_rows - 1))
            if last is not None and first <= last:
                raise ValueError(f"genselect shards out of problem order at {first}")
            last = last_row
        yield formats(shard, names, data_source, start)
        start += shard.num_rows


def _order_key(t: pa.Table, i: int) -> tuple:
    return t["problem_id"][i].as_py(), t["prompt_index"][i].as_py()


# -- the RL export of the kept problems -------------------------------------------------------------------
# A problem's difficulty as measured on the build's teachers (``measured_on``), for trainers that filter or
# weight problems during RL: the pass rate over ``n_samples``, and unbiased pass@k for k = 1, 2, 4, ... <= n.
PASS_AT_K = pa.list_(pa.struct([("k", pa.int32()), ("value", pa.float64())]))
RL_SCHEMA = verl_schema([("problem_id", pa.string()), ("index", pa.int32()), ("question", pa.string()),
                         ("pass_rate", pa.float64()), ("n_samples", pa.int32()), ("n_correct", pa.int32()),
                         ("pass_at_k", PASS_AT_K), ("measured_on", pa.list_(pa.string())),
                         ("verify", pa.string()), ("solution", pa.string())])  # fmt: skip

RL_CANDIDATES_SCHEMA = pa.schema(
    [
        ("problem_id", pa.string()),
        ("candidate_id", pa.string()),
        ("teacher", pa.string()),
        ("response", pa.string()),
        ("reward", pa.float64()),
        ("correct", pa.bool_()),
        ("status", pa.string()),
    ]
)


def to_rl(kept: pa.Table, data_source: str, templates: dict[str, str], verify: dict, start: int = 0) -> pa.Table:
    """RL rows in problem_id order from ``kept`` (problem_id, domain, question, answer, tests and the difficulty:
    pass_rate, n, n_correct, pass_at_k as map entries, teachers);
    ``extra_info.index`` counts from ``start``. ``templates`` and ``verify`` map a domain to its prompt
    template and its checking config (a model with ``key_config()``)."""
    settings = {d: json.dumps(cfg.key_config(), sort_keys=True) for d, cfg in verify.items()}
    golds = {d: cfg.model_dump_json() for d, cfg in verify.items()}
    rows = []
    for i, r in enumerate(kept.sort_by("problem_id").to_pylist(), start):
        domain = r["domain"]
        truth = r["tests"] if domain == "code" else r["answer"]
        if truth and domain == "math":
            truth = gold_answer(truth, golds[domain])
        if not truth:
            field = "tests" if domain == "code" else "answer"
            raise DataError("a kept problem has no ground truth", "problems", r["problem_id"], field)
        rows.append({
            "data_source": data_source,
            "prompt": [{"role": "user", "content": render(templates[domain], r["question"])}],
            "ability": domain,
            "reward_model": {"style": "rule", "ground_truth": truth},
            "extra_info": {"problem_id": r["problem_id"], "index": i, "question": r["question"],
                           "pass_rate": r["pass_rate"], "n_samples": r["n"], "n_correct": r["n_correct"],
                           "pass_at_k": [{"k": e["key"], "value": e["value"]} for e in r["pass_at_k"] or []],
                           "measured_on": r["teachers"], "verify": settings[domain], "solution": r["answer"]},
        })  # fmt: skip
    return pa.Table.from_pylist(rows, schema=RL_SCHEMA)


KEPT_PROBLEMS = """
    WITH teachers AS (SELECT problem_id, list(teacher ORDER BY teacher) AS teachers FROM problem_stats
                      WHERE teacher <> '*' {aside} GROUP BY problem_id)
    SELECT p.problem_id, p.domain, p.question, p.answer, p.tests, s.pass_rate, s.n, s.n_correct,
           map_entries(s.pass_at_k) AS pass_at_k, t.teachers
    FROM problems p JOIN problem_stats s ON s.problem_id = p.problem_id AND s.teacher = '*' AND s.keep
    JOIN teachers t ON t.problem_id = p.problem_id
    ORDER BY p.problem_id
"""
KEPT_CANDIDATES = {"problem_id": "candidates", "candidate_id": "candidates", "teacher": "candidates",
                   "response": "candidates.text", "reward": "verdicts", "correct": "verdicts", "status": "verdicts"}
_BATCH = 100_000  # rows per part written


def rl_parts(i, data_source: str, templates: dict[str, str], verify: dict,
             counted_reference: bool = True) -> Iterator[dict[str, pa.Table]]:
    """The RL dataset's tables from inputs with the views ``problems``, ``candidates``, ``verdicts`` and
    ``problem_stats``, in parts of _BATCH rows in problem_id order: the kept problems, then their candidates
    (streamed in chunks of whole problems: never all the texts at once). ``counted_reference``: the overall
    pass rate counts the reference solutions, so ``measured_on`` names them."""
    from bonforge.selection import judged_pool

    query = KEPT_PROBLEMS.format(aside="" if counted_reference else f"AND teacher <> '{REFERENCE_TEACHER}'")
    start = 0
    for batch in i.con.sql(query).to_arrow_reader(_BATCH):
        yield {"rl": to_rl(pa.Table.from_batches([batch]), data_source, templates, verify, start)}
        start += batch.num_rows
    if not start:
        yield {"rl": to_rl(i.sql(query), data_source, templates, verify)}  # the schema of an empty file
    order = [("problem_id", "ascending"), ("candidate_id", "ascending")]
    columns, schema = KEPT_CANDIDATES, RL_CANDIDATES_SCHEMA
    if trajectories.any_in(i):  # the trajectories as stored (JSON: every message and field, tool outputs too)
        columns, schema = {**columns, "messages": "candidates"}, schema.append(pa.field("messages", pa.string()))
    labelled = (t.filter(pc.invert(pc.fill_null(pc.is_in(t.column("status"), value_set=pa.array(NO_LABEL)), False)))
                for t in judged_pool.chunks(i, columns))  # a verdict without a label is no training row
    for part in judged_pool.rebatched((t.sort_by(order) for t in labelled), _BATCH):
        yield {"candidates": part.cast(schema)}


def rl_dataset(i, recipe) -> tuple[Iterator[dict[str, pa.Table]], dict]:
    """(parts, trainers) of the RL dataset of the kept problems (``export.rl``), with the reward of the
    recipe's domain."""
    from bonforge import templates

    cfg, domain = recipe.export.rl, recipe.problems.domain
    prompt = templates.load(cfg.template, f"sample_{domain}.txt", ("{question}",), "export.rl.template")
    # the policy answers the sampling template in a fenced block: `auto` also reads completions
    code = recipe.verify.code.model_copy(update={"extraction": "auto"})
    verify = {"math": recipe.verify.math, "code": code}
    counted = not recipe.problems.include_reference or recipe.filter.count_reference
    parts = rl_parts(i, f"bonforge/{recipe.problems.name}", {domain: prompt}, verify, counted)
    out = trainers(domain, "rl/train.parquet")
    out["verl"].update(rollout_tool(recipe))
    return parts, out


def rollout_tool(recipe) -> dict:
    """Where the recipe's teachers sampled with the Python tool, the tool a trainer's rollout offers the policy
    (the same schema, limits and sandbox settings), for the manifest's verl section: ``tool_config`` (verl's
    tool config of ``bonforge.rewards.tools``: written to a YAML file, it is what
    ``actor_rollout_ref.rollout.multi_turn.tool_config_path`` names) and the override that turns multi-turn
    rollouts on."""
    from bonforge.llm.tools import SCHEMA
    from bonforge.rewards.tools import tool_config

    tool = next((t.python_tool for t in recipe.teachers if getattr(t, "python_tool", None)), None)
    if tool is None:
        return {}
    sandbox = recipe.verify.code.model_dump(include={"image", "backend", "memory_mb", "output_limit_bytes"},
                                            exclude_none=True)
    return {"tool_config": tool_config(SCHEMA, tool.time_limit_s, tool.output_chars, sandbox),
            "multi_turn_overrides": ["actor_rollout_ref.rollout.multi_turn.enable=true"]}


_SFT = {"problem_id": "candidates", "question": "problems", "candidate_id": "candidates", "teacher": "candidates",
        "text": "candidates", "correct": "verdicts"}
_SFT_BESIDE = {"problem_id": pa.string(), "candidate_id": pa.string(), "teacher": pa.string()}


def sft_dataset(i) -> Iterator[dict[str, pa.Table]]:
    """The SFT dataset (``export.sft``) from inputs with ``problems``, ``candidates``, ``verdicts`` and
    ``problem_stats``: each kept problem's first correct candidate by candidate id, as TRL ``messages`` (a
    trajectory whole, in the typed shape of ``trajectories.MESSAGES``) and a plain table, in problem_id order."""
    from bonforge.selection import judged_pool
    from bonforge.selection.sft import sft_messages

    acted = trajectories.any_in(i)
    columns = {**_SFT, "messages": "candidates"} if acted else _SFT
    empty = True
    for t in judged_pool.chunks(i, columns):
        t = t.filter(pc.fill_null(t.column("correct"), False)).sort_by([("problem_id", "ascending"),
                                                                         ("candidate_id", "ascending")])
        pids = t.column("problem_id").to_numpy(zero_copy_only=False)
        first = t.take(pa.array(np.flatnonzero(np.r_[True, pids[1:] != pids[:-1]] if len(pids) else [])))
        if first.num_rows or empty:
            empty = False
            plain = first.drop_columns(["correct"] + (["messages"] if acted else []))
            yield {"trl": sft_messages(first, _SFT_BESIDE), "plain": plain}
    if empty:  # no kept problem: the files' schemas
        none = pa.table({"question": pa.array([], pa.string()), "text": pa.array([], pa.string()),
                         **{k: pa.array([], kind) for k, kind in _SFT_BESIDE.items()}})
        yield {"trl": sft_messages(none, _SFT_BESIDE), "plain": none}


def genselect_trainers(recipe) -> dict | None:
    """The GenSelect dataset's ``trainers`` section (for its verl file)."""
    if "verl" not in recipe.export.formats:
        return None
    return trainers("genselect", "verl/train.parquet", recipe.genselect.max_tokens)


def sft_trainers() -> dict:
    """An SFT dataset's ``trainers`` section (FusioN's, ``export.sft``'s): TRL's SFTTrainer and verl's
    multi-turn SFT dataset read the same ``messages`` file."""
    return trainers(None, "trl/train.parquet", sft=True)


def preference_trainers() -> dict:
    """The preference dataset's ``trainers`` section (TRL's conversational preference shape)."""
    return {"trl": {"trainer": "RewardTrainer", "also": ["DPOTrainer"], "train_file": "trl/train.parquet",
                    "format": "preference"}}


# -- what each trainer needs ----------------------------------------------------------------------------------
def trainers(reward: str | None, train_file: str, max_prompt_tokens: int | None = None, sft: bool = False) -> dict:
    """The manifest's ``trainers`` section. ``reward``: the reward module (``genselect``, ``math``,
    ``code``) for RL data; ``max_prompt_tokens``: the longest prompt the data may hold (verl's default
    ``data.max_prompt_length`` of 512 would drop most GenSelect prompts); ``sft``: a TRL ``messages`` file
    for SFTTrainer instead."""
    if sft:
        return {"trl": {"trainer": "SFTTrainer", "train_file": train_file, "format": "messages"},
                "verl": {"dataset": "verl.utils.dataset.multiturn_sft_dataset.MultiTurnSFTDataset",
                         "train_file": train_file, "overrides": ["data.messages_key=messages"]}}
    module = f"bonforge.rewards.{reward}"
    pairs = [("path", f"pkg://{module}"), ("name", "compute_score")]
    data = ["data.reward_fn_key=data_source"]
    if max_prompt_tokens:
        data.append(f"data.max_prompt_length={max_prompt_tokens}")
    return {
        "verl": {
            "train_file": train_file,
            "overrides": [f"reward.custom_reward_function.{k}={v}" for k, v in pairs] + data,
            "legacy_overrides": [f"custom_reward_function.{k}={v}" for k, v in pairs],
        },
        "trl": {"trainer": "GRPOTrainer", "train_file": train_file, "reward_funcs": f"{module}.{reward}_reward"},
    }  # fmt: skip
