"""The content identity of a row, in one place: what makes a stored sample or verdict the same as one a
stage is about to compute (``bonforge.engine.reuse`` takes a row from the store when its identity is there).

* a sample: the model identity and the sampling settings that shape it (all but ``n`` and the execution-only
  fields, see ``bonforge.stages.sample.sample_settings``), the rendered prompt, the sample index and its seed;
* a verdict: the verification settings (stage version included), the problem's domain, its gold answer or
  test spec, and the candidate's text.

A sample's identity is 16 bytes of a SHA-256 over length-prefixed parts (no two different part lists
give the same input: the settings and the prompt), then its index and seed. A verdict's is 16 bytes of a
SHA-256 over the settings and its problem's parts (once per problem), then a byte that says whether the
text is null and 16 bytes of the text's SHA-256 (``text_digests``, by DuckDB over the Arrow column). The
text hash is cryptographic on purpose: a candidate's text comes from a policy that may search for a
collision (XXH3 was 3.7x faster, but pairs of texts that collide under it can be constructed), and a text
must never take another's verdict. The widths (28 bytes for a sample, 33 for a verdict, 16 in the layout
before) never match each other, so an index of an older layout only means its rows are computed again.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bonforge.keys import canonical_json

SIZE = 16
TYPE = pa.binary()  # 28 bytes for a sample, 33 for a verdict


def settings(kind: str, fields: dict) -> str:
    """The digest (hex) of a stage's row-shaping settings (``kind``: "sample" or "verdict")."""
    return hashlib.sha256(f"{kind}\0{canonical_json(fields)}".encode()).hexdigest()


def _field(value: str | None) -> bytes:
    if value is None:
        return b"~"
    data = value.encode()
    return b"%d:%s" % (len(data), data)


def text_digests(texts: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """One row of 17 bytes per text: 1 and 16 bytes of the text's SHA-256, or 17 zero bytes for a null.
    DuckDB hashes the Arrow column where it lies, on every core (2x a loop over hashlib on 2 cores)."""
    import duckdb

    out = np.zeros((len(texts), 1 + SIZE), np.uint8)
    if not len(texts):
        return out
    con = duckdb.connect()
    con.register("t", pa.table({"text": texts}))
    query = f"SELECT unhex(left(sha256(coalesce(text, '')), {2 * SIZE})) AS d FROM t"
    digests = con.sql(query).to_arrow_table().column("d").combine_chunks().cast(pa.binary(SIZE))
    out[:, 0] = 1
    out[:, 1:] = np.frombuffer(digests.buffers()[1], np.uint8).reshape(len(texts), SIZE)
    if texts.null_count:
        out[pc.is_null(texts).to_numpy(zero_copy_only=False)] = 0
    return out


def _fixed(rows: np.ndarray) -> pa.Array:
    """Each row of a 2-D uint8 array as one binary value."""
    rows = np.ascontiguousarray(rows)
    buffers = [None, pa.py_buffer(rows.tobytes())]
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(rows.shape[1]), len(rows), buffers).cast(TYPE)


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
    return _fixed(np.concatenate([digests[pos], index, seed], axis=1))


def verdict_ids(settings_hex: str, problems: pa.Table, candidates: pa.Table) -> pa.Array:
    """The identity of the verdict on each candidate (``problem_id``, ``text``) of ``problems``
    (``problem_id``, ``domain``, ``gold``: the gold answer, or for code everything the judge reads of the
    problem: its test spec and question)."""
    parts = [problems.column(c).to_pylist() for c in ("domain", "gold")]
    prefix = [hashlib.sha256(b"".join([settings_hex.encode(), *map(_field, values)])).digest()[:SIZE]
              for values in zip(*parts)]
    pids = candidates.column("problem_id")
    pos = pc.index_in(pids, value_set=problems.column("problem_id"))
    if pos.null_count:  # a candidate without its problem: a prefix of its own problem id, never another's
        orphans = pc.unique(pids.filter(pc.is_null(pos)))
        prefix += [hashlib.sha256(b"no problem\0" + _field(pid)).digest()[:SIZE] for pid in orphans.to_pylist()]
        pos = pc.coalesce(pos, pc.add(pc.index_in(pids, value_set=orphans), problems.num_rows))
    digests = np.frombuffer(b"".join(prefix), np.uint8).reshape(-1, SIZE)
    rows = digests[pos.to_numpy(zero_copy_only=False).astype(np.int64)]
    return _fixed(np.concatenate([rows, text_digests(candidates.column("text"))], axis=1))
