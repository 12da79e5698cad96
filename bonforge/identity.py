"""The content identity of a row, in one place: what makes a stored sample or verdict the same as one a
stage is about to compute (``bonforge.engine.reuse`` takes a row from the store when its identity is there).

* a sample: the model identity and the sampling settings that shape it (all but ``n`` and the execution-only
  fields, see ``bonforge.stages.sample.sample_settings``), the rendered prompt, the sample index and its seed;
* a verdict: the verification settings (stage version included), the problem's domain, its gold answer or
  test spec, and the candidate's text.

An identity is the first 16 bytes of a SHA-256 over length-prefixed parts (no two different part lists
give the same input), computed by DuckDB over whole Arrow columns (1.6 M verdict identities in about a
second, where a Python loop takes several). The parts of a problem (settings, prompt or gold) are hashed
once per problem, then with each row's own parts.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa

from bonforge.keys import canonical_json

SIZE = 16
TYPE = pa.binary(SIZE)


def settings(kind: str, fields: dict) -> str:
    """The digest (hex) of a stage's row-shaping settings (``kind``: "sample" or "verdict")."""
    return hashlib.sha256(f"{kind}\0{canonical_json(fields)}".encode()).hexdigest()


def _part(column: str) -> str:
    value = f"CAST({column} AS VARCHAR)"
    return f"(CASE WHEN {column} IS NULL THEN '~' ELSE strlen({value})::VARCHAR || ':' || {value} END)"


def _hash(*parts: str) -> str:
    return f"unhex(left(sha256({' || '.join(parts)}), {2 * SIZE}))"


def _per_row(problems: pa.Table, problem_parts: list[str], rows: pa.Table, row_parts: list[str],
             settings_hex: str) -> pa.Array:
    """One identity per row of ``rows``: settings + its problem's parts (``problems``, by ``problem_id``)
    + its own parts."""
    import duckdb

    con = duckdb.connect()
    con.register("p", problems)
    con.register("r", rows.select(["problem_id", *row_parts]).append_column("rn", pa.array(np.arange(rows.num_rows))))
    query = f"""WITH h AS (SELECT problem_id, hex({_hash("$settings", *map(_part, problem_parts))}) AS ph FROM p)
                SELECT {_hash(_part("coalesce(h.ph, 'no problem ' || r.problem_id)"),
                               *(_part(f"r.{c}") for c in row_parts))} AS id
                FROM r LEFT JOIN h USING (problem_id) ORDER BY r.rn"""
    out = con.sql(query, params={"settings": settings_hex}).to_arrow_table()
    return out.column("id").combine_chunks().cast(TYPE)


def sample_ids(settings_hex: str, prompts: pa.Table, samples: pa.Table) -> pa.Array:
    """The identity of each sample (``problem_id``, ``sample_index``, ``seed``) of the rendered prompts
    (``problem_id``, ``prompt``)."""
    return _per_row(prompts, ["prompt"], samples, ["sample_index", "seed"], settings_hex)


def verdict_ids(settings_hex: str, problems: pa.Table, candidates: pa.Table) -> pa.Array:
    """The identity of the verdict on each candidate (``problem_id``, ``text``) of ``problems``
    (``problem_id``, ``domain``, ``gold``: the gold answer, or for code everything the judge reads of the
    problem: its test spec and question)."""
    return _per_row(problems, ["domain", "gold"], candidates, ["text"], settings_hex)
