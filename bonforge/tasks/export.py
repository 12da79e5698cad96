"""Trainer formats for the GenSelect table.

* ``verl``: verl's RL parquet — ``data_source``, ``prompt`` (chat messages), ``ability``,
  ``reward_model {style: "rule", ground_truth}``, ``extra_info``. ``ground_truth`` is the JSON list of
  correct candidate indices: a reward function scores the index after the last ``Judgment:`` by
  membership.
* ``plain``: the genselect table as stored (one row per prompt).
"""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

VERL_SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        (
            "extra_info",
            pa.struct(
                [
                    ("prompt_id", pa.string()),
                    ("problem_id", pa.string()),
                    ("index", pa.int32()),
                    ("candidate_ids", pa.list_(pa.string())),
                    ("n_candidates", pa.int32()),
                ]
            ),
        ),
    ]
)


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
    return genselect.sort_by(ORDER)


def formats(genselect: pa.Table, names: list[str], data_source: str, start: int = 0) -> dict[str, pa.Table]:
    return {name: to_verl(genselect, data_source, start) if name == "verl" else to_plain(genselect) for name in names}


def stream(shards: Iterable[pa.Table], names: list[str], data_source: str) -> Iterator[dict[str, pa.Table]]:
    """``formats`` of each genselect shard in turn (shards hold whole problems in problem_id order, so the
    concatenation is in (problem_id, prompt_index) order): one shard in memory at a time."""
    start, last = 0, None
    for shard in shards:
        shard = to_plain(shard)
        if shard.num_rows:
            first, last_row = (_order_key(shard, i) for i in (0, shard.num_rows - 1))
            if last is not None and first <= last:
                raise ValueError(f"genselect shards out of problem order at {first}")
            last = last_row
        yield formats(shard, names, data_source, start)
        start += shard.num_rows


def _order_key(t: pa.Table, i: int) -> tuple:
    return t["problem_id"][i].as_py(), t["prompt_index"][i].as_py()
