"""Trainer formats for the GenSelect table.

* ``verl``: verl's RL parquet — ``data_source``, ``prompt`` (chat messages), ``ability``,
  ``reward_model {style: "rule", ground_truth}``, ``extra_info``. ``ground_truth`` is the JSON list of
  correct candidate indices: a reward function scores the index after the last ``Judgment:`` by
  membership.
* ``plain``: the genselect table as stored (one row per prompt).
"""

from __future__ import annotations

import json

import pyarrow as pa

VERL_SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        ("extra_info", pa.struct([
            ("prompt_id", pa.string()), ("problem_id", pa.string()), ("index", pa.int32()),
            ("candidate_ids", pa.list_(pa.string())), ("n_candidates", pa.int32()),
        ])),
    ]
)


def to_verl(genselect: pa.Table, data_source: str) -> pa.Table:
    rows = []
    t = genselect.sort_by([("prompt_id", "ascending")])
    for i, r in enumerate(t.to_pylist()):
        rows.append({
            "data_source": data_source,
            "prompt": [{"role": "user", "content": r["prompt"]}],
            "ability": "genselect",
            "reward_model": {"style": "rule", "ground_truth": json.dumps(r["correct_indices"])},
            "extra_info": {"prompt_id": r["prompt_id"], "problem_id": r["problem_id"], "index": i,
                           "candidate_ids": r["candidate_ids"], "n_candidates": r["n_candidates"]},
        })
    return pa.Table.from_pylist(rows, schema=VERL_SCHEMA)


def to_plain(genselect: pa.Table) -> pa.Table:
    return genselect.sort_by([("prompt_id", "ascending")])


def formats(genselect: pa.Table, names: list[str], data_source: str) -> dict[str, pa.Table]:
    out = {}
    for name in names:
        out[name] = to_verl(genselect, data_source) if name == "verl" else to_plain(genselect)
    return out
