"""Digests: stage keys, ``key = sha256(canonical JSON of stage name, code version, key config, upstream
keys)[:20]``, and files' sha256.

A leaf module (the store, the stage declaration, the data and model fetchers use it). ``stage_key`` has one caller,
``bonforge.stage.Node.key``: a key is always derived from a declared stage, never assembled by hand.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def stage_key(stage: str, version: str, config: Any, upstream: dict[str, str]) -> str:
    """The identity of a stage's output: same key ⇒ same output ⇒ never recomputed."""
    payload = canonical_json({"stage": stage, "version": version, "config": config, "upstream": upstream})
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
