"""The content identity of a row, in one place: what makes a stored sample or verdict the same as one a
stage is about to compute (``bonforge.engine.reuse`` takes a row from the store when its identity is there).

* a sample: the model identity and the sampling settings that shape it (all but ``n`` and the execution-only
  fields, see ``bonforge.stages.sample.sample_settings``), the rendered prompt, the sample index and its seed;
* a verdict: the verification settings (stage version included), the problem's domain, its gold answer or
  test spec, and the candidate's text.

An identity is 16 bytes of BLAKE2b over length-prefixed parts, so no two different part lists collide by
concatenation. A leaf module.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

from bonforge.keys import canonical_json

SIZE = 16


def _hasher(*parts: str | bytes | None) -> "hashlib._Hash":
    h = hashlib.blake2b(digest_size=SIZE)
    for part in parts:
        _feed(h, part)
    return h


def _feed(h, part: str | bytes | None) -> None:
    if part is None:
        h.update(b"\xff" * 8)  # None is not ""
        return
    data = part.encode() if isinstance(part, str) else part
    h.update(len(data).to_bytes(8, "little"))
    h.update(data)


def settings(kind: str, fields: dict) -> bytes:
    """The digest of a stage's row-shaping settings (``kind``: "sample" or "verdict")."""
    return _hasher(kind, canonical_json(fields)).digest()


def sample_ids(settings_digest: bytes, prompt: str, seeds: Iterable[tuple[int, int]]) -> list[bytes]:
    """The identity of each sample ``(index, seed)`` of one rendered prompt."""
    base = _hasher(settings_digest, prompt)
    out = []
    for index, seed in seeds:
        h = base.copy()
        _feed(h, f"{index}/{seed}")
        out.append(h.digest())
    return out


def verdict_ids(settings_digest: bytes, domain: str, gold: str | None, texts: Iterable[str | None]) -> list[bytes]:
    """The identity of the verdict on each candidate text of one problem (``gold``: the gold answer, or for
    code everything the judge reads of the problem: its test spec and question)."""
    base = _hasher(settings_digest, domain, gold)
    out = []
    for text in texts:
        h = base.copy()
        _feed(h, text)
        out.append(h.digest())
    return out
