"""The content identity of a row, in one place: what makes a stored sample or verdict the same as one a
stage is about to compute (``bonforge.engine.reuse`` takes a row from the store when its identity is there).

* a sample: the model identity and the sampling settings that shape it (all but ``n`` and the execution-only
  fields, see ``bonforge.stages.sample.sample_settings``), the rendered prompt, the sample index and its seed;
* a verdict: the verification settings (stage version included) and the judge's fingerprint
  (``bonforge.judging.fingerprint``), the problem's domain, its gold answer or test spec, and the
  candidate's text.

A sample's identity is 16 bytes of a SHA-256 over length-prefixed parts (no two different part lists
give the same input: the settings and the prompt), then its index and seed. A verdict's is 16 bytes of a
SHA-256 over the settings and its problem's parts (once per problem), then a byte that says whether the
text is null and 16 bytes of the text's SHA-256: its ``text_digest``, hashed once where the candidate is
written (``with_digests``: the sampler, imported pools), or by DuckDB over the text column where a stored
candidate has none (written before the column existed). The
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


def sha256(columns: list[pa.Array | pa.ChunkedArray], prefix: str = "", raw: bool = False) -> np.ndarray:
    """The SHA-256 (32 bytes a row) of ``prefix`` and each row's values, length-prefixed as ``_field``
    does (``raw``: of one column's string as it is, '' for a null). DuckDB hashes the Arrow columns where
    they lie, on every core (2x a loop over hashlib on 2 cores)."""
    from bonforge.runtime import scratch_db

    if not len(columns[0]):
        return np.zeros((0, 32), np.uint8)
    parts = ["coalesce(c0, '')"] if raw else [f"coalesce(strlen(c{i})::VARCHAR || ':' || c{i}, '~')"
                                              for i in range(len(columns))]
    query = f"SELECT unhex(sha256($prefix || {' || '.join(parts)})) AS d FROM t"
    with scratch_db.cursor() as con:
        con.register("t", pa.table({f"c{i}": c for i, c in enumerate(columns)}))
        digests = con.sql(query, params={"prefix": prefix}).to_arrow_table().column("d").combine_chunks()
    return _rows(digests.cast(pa.binary(32)), 32)


def _rows(values: pa.Array, width: int) -> np.ndarray:
    """The values of a fixed-size binary array as a 2-D uint8 array (garbage where null)."""
    data = np.frombuffer(values.buffers()[1], np.uint8)
    return data[values.offset * width:(values.offset + len(values)) * width].reshape(len(values), width)


def text_digests(texts: pa.Array | pa.ChunkedArray, known: pa.Array | pa.ChunkedArray | None = None) -> np.ndarray:
    """One row of 17 bytes per text: 1 and 16 bytes of the text's SHA-256, or 17 zero bytes for a null.
    ``known``: the texts' ``text_digest`` column (``with_digests``, written with each candidate): a text
    is hashed here only where its digest is null (an output written before the column existed)."""
    out = np.zeros((len(texts), 1 + SIZE), np.uint8)
    if not len(texts):
        return out
    valid = pc.is_valid(texts).to_numpy(zero_copy_only=False)
    need = valid
    if known is not None and known.null_count < len(known):
        known = known.combine_chunks() if isinstance(known, pa.ChunkedArray) else known
        have = valid & pc.is_valid(known).to_numpy(zero_copy_only=False)
        out[have, 1:] = _rows(known.cast(pa.binary(SIZE)), SIZE)[have]
        need = valid & ~have
    if need.any():
        out[need, 1:] = sha256([texts.filter(pa.array(need))], raw=True)[:, :SIZE]
    out[valid, 0] = 1
    return out


def with_digests(candidates: pa.Table) -> pa.Table:
    """``candidates`` with its ``text_digest`` column (16 bytes of each text's SHA-256, null for a null text)
    filled where it is null: a candidate's text is hashed once, where it is written, and verification's
    row identity reads the digest instead of hashing the text again."""
    known = candidates.column("text_digest") if "text_digest" in candidates.column_names else None
    rows = text_digests(candidates.column("text"), known)
    digests = pa.FixedSizeBinaryArray.from_buffers(pa.binary(SIZE), len(rows),
                                                   [None, pa.py_buffer(np.ascontiguousarray(rows[:, 1:]).tobytes())])
    digests = pc.if_else(pa.array(rows[:, 0] == 1), digests, pa.nulls(len(rows), pa.binary(SIZE)))
    if known is None:
        return candidates.append_column("text_digest", digests)
    return candidates.set_column(candidates.column_names.index("text_digest"), "text_digest", digests)


def _fixed(rows: np.ndarray) -> pa.Array:
    """Each row of a 2-D uint8 array as one binary value."""
    rows = np.ascontiguousarray(rows)
    buffers = [None, pa.py_buffer(rows.tobytes())]
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(rows.shape[1]), len(rows), buffers).cast(TYPE)


def sample_ids(settings_hex: str, prompts: pa.Array, prompt_of: np.ndarray, index: np.ndarray,
               seed: np.ndarray) -> pa.Array:
    """The identity of each sample: 16 bytes of SHA-256 over the settings and its prompt (``prompts``,
    rendered, one per prompt; ``prompt_of``: each sample's position in it), then its index (4 bytes) and
    its seed (8 bytes), big-endian: nothing to hash per sample."""
    digests = sha256([prompts], settings_hex)[:, :SIZE]
    index = np.asarray(index).astype(">i4").view(np.uint8).reshape(-1, 4)
    seed = np.asarray(seed).astype(">i8").view(np.uint8).reshape(-1, 8)
    return _fixed(np.concatenate([digests[prompt_of], index, seed], axis=1))


def verdict_ids(settings_hex: str, problems: pa.Table, candidates: pa.Table) -> pa.Array:
    """The identity of the verdict on each candidate (``problem_id``, ``text``, and ``text_digest`` where
    it was written; ``language`` where its record names one) of ``problems`` (``problem_id``, ``domain``,
    ``gold``: the gold answer, or for code everything the judge reads of the problem: its test spec and
    question)."""
    return verdict_id_sets([settings_hex], problems, candidates)[0]


def verdict_id_sets(settings: list[str], problems: pa.Table, candidates: pa.Table) -> list[pa.Array]:
    """``verdict_ids`` under each of the ``settings`` digests, each text hashed once (a verdict's identity
    and its identity without the judge's fingerprint: ``bonforge.engine.reuse`` counts re-judged rows)."""
    pids = candidates.column("problem_id")
    pos = pc.index_in(pids, value_set=problems.column("problem_id"))
    orphans = None
    if pos.null_count:  # a candidate without its problem: a prefix of its own problem id, never another's
        orphans = pc.unique(pids.filter(pc.is_null(pos)))
        pos = pc.coalesce(pos, pc.add(pc.index_in(pids, value_set=orphans), problems.num_rows))
    at = pos.to_numpy(zero_copy_only=False).astype(np.int64)
    known = candidates.column("text_digest") if "text_digest" in candidates.column_names else None
    texts = text_digests(candidates.column("text"), known)
    if "language" in candidates.column_names:
        texts = _with_language(texts, candidates.column("language"))
    out = []
    for settings_hex in settings:
        prefix = [sha256([problems.column("domain"), problems.column("gold")], settings_hex)[:, :SIZE]]
        if orphans is not None:
            prefix += [np.frombuffer(b"".join(hashlib.sha256(b"no problem\0" + _field(pid)).digest()[:SIZE]
                                              for pid in orphans.to_pylist()), np.uint8).reshape(-1, SIZE)]
        out.append(_fixed(np.concatenate([np.concatenate(prefix)[at], texts], axis=1)))
    return out


def _with_language(texts: np.ndarray, languages: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The language a candidate's record names decides its verdict with its text: folded into the text's
    digest where one is named (a candidate without one keeps the identity it had before the column)."""
    named = np.flatnonzero(pc.is_valid(languages).to_numpy(zero_copy_only=False))
    if not len(named):
        return texts
    texts = texts.copy()
    for row, lang in zip(named.tolist(), languages.take(pa.array(named)).to_pylist(), strict=True):
        texts[row, 1:] = np.frombuffer(hashlib.sha256(b"language\0" + _field(lang) + texts[row, 1:].tobytes())
                                       .digest()[:SIZE], np.uint8)  # fmt: skip
    return texts
