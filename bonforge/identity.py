"""The content identity of a row, in one place: what makes a stored sample or verdict the same as one a
stage is about to compute (``bonforge.engine.reuse`` takes a row from the store when its identity is there).

* a sample: the model identity and the sampling settings that shape it (all but ``n`` and the execution-only
  fields, see ``bonforge.stages.sample.sample_settings``), the rendered prompt, the sample index and its seed;
* a verdict: the verification settings (stage version included), the problem's domain, its gold answer or
  test spec, and the candidate's text.

An identity is the first 16 bytes of a SHA-256 over length-prefixed parts (no two different part lists
give the same input), for a sample followed by its index and seed. The parts of a problem (settings,
prompt or gold) are hashed once per problem; the rows' own parts (a candidate's text) by DuckDB over whole
Arrow columns, on every core.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bonforge.keys import canonical_json

SIZE = 16
TYPE = pa.binary()  # 16 bytes for a verdict, 28 for a sample


def settings(kind: str, fields: dict) -> str:
    """The digest (hex) of a stage's row-shaping settings (``kind``: "sample" or "verdict")."""
    return hashlib.sha256(f"{kind}\0{canonical_json(fields)}".encode()).hexdigest()


def _field(value: str | None) -> bytes:
    if value is None:
        return b"~"
    data = value.encode()
    return b"%d:%s" % (len(data), data)


def _part(column: str) -> str:
    """The SQL of ``_field``: the value's length in bytes, a colon and the value, or ``~`` for null."""
    value = f"CAST({column} AS VARCHAR)"
    return f"(CASE WHEN {column} IS NULL THEN '~' ELSE strlen({value})::VARCHAR || ':' || {value} END)"


def _per_row(problems: pa.Table, problem_parts: list[str], rows: pa.Table, row_parts: list[str],
             settings_hex: str) -> pa.Array:
    """One identity per row of ``rows``: SHA-256 of (the hex SHA-256 of the settings and its problem's parts,
    by ``problem_id``) and its own parts. The problems' part in Python (once per problem), the rows' in one
    DuckDB projection (it keeps the rows' order)."""
    import duckdb

    columns = [problems.column(c).to_pylist() for c in problem_parts]
    prefix = pa.array([hashlib.sha256(b"".join([settings_hex.encode(), *map(_field, values)])).hexdigest()
                       for values in zip(*columns)], pa.string())
    pos = pc.index_in(rows.column("problem_id"), value_set=problems.column("problem_id"))
    orphan = pc.binary_join_element_wise("no problem ", rows.column("problem_id"), "")  # never another's
    flat = pa.table({"h": pc.coalesce(prefix.take(pos), orphan), **{c: rows.column(c) for c in row_parts}})
    con = duckdb.connect()
    con.register("r", flat)
    parts = " || ".join(map(_part, ["h", *row_parts]))
    out = con.sql(f"SELECT unhex(left(sha256({parts}), {2 * SIZE})) AS id FROM r").to_arrow_table()
    return out.column("id").combine_chunks().cast(TYPE)


def sample_ids(settings_hex: str, prompts: pa.Table, samples: pa.Table) -> pa.Array:
    """The identity of each sample (``problem_id``, ``sample_index``, ``seed``) of the rendered prompts
    (``problem_id``, ``prompt``): 16 bytes of SHA-256 over the settings and the prompt, then the sample
    index (4 bytes) and the seed (8 bytes), big-endian: nothing to hash per sample."""
    prompt = b"".join(hashlib.sha256(settings_hex.encode() + _field(text)).digest()[:SIZE]
                      for text in prompts.column("prompt").to_pylist())
    digests = np.frombuffer(prompt, dtype=np.uint8).reshape(-1, SIZE)
    pos = pc.index_in(samples.column("problem_id"), value_set=prompts.column("problem_id")).to_numpy()
    index = samples.column("sample_index").to_numpy().astype(">i4").view(np.uint8).reshape(-1, 4)
    seed = samples.column("seed").to_numpy().astype(">i8").view(np.uint8).reshape(-1, 8)
    rows = np.ascontiguousarray(np.concatenate([digests[pos], index, seed], axis=1))
    width = SIZE + 12
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(rows), [None, pa.py_buffer(rows.tobytes())])
    return fixed.cast(TYPE)


def verdict_ids(settings_hex: str, problems: pa.Table, candidates: pa.Table) -> pa.Array:
    """The identity of the verdict on each candidate (``problem_id``, ``text``) of ``problems``
    (``problem_id``, ``domain``, ``gold``: the gold answer, or for code everything the judge reads of the
    problem: its test spec and question)."""
    return _per_row(problems, ["domain", "gold"], candidates, ["text"], settings_hex)
