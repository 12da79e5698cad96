"""Reading JSONL / Parquet records with errors that name the file, the record and the field."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterator

from bonforge.errors import DataError

_MISSING = object()


def read_records(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number_or_row, record)``; a malformed line raises ``DataError`` naming it."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, rec in enumerate(pq.read_table(path).to_pylist()):
            yield i, rec
        return
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise DataError(f"invalid UTF-8 at byte {e.start}", str(path), f"line {lineno}") from None
            except json.JSONDecodeError as e:
                raise DataError(f"not valid JSON ({e.msg} at column {e.colno})", str(path), f"line {lineno}") from None
            if not isinstance(rec, dict):
                raise DataError(f"expected a JSON object, got {type(rec).__name__}", str(path), f"line {lineno}")
            yield lineno, rec


def get_field(rec: dict, dotted: str, *, source: str = "", record: Any = None, default: Any = _MISSING) -> Any:
    """``rec['a']['b']`` for ``'a.b'``; a missing field raises ``DataError`` unless a default is given."""
    node: Any = rec
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            if default is not _MISSING:
                return default
            keys = ", ".join(sorted(rec)[:12]) if isinstance(rec, dict) else ""
            raise DataError(f"missing field (record has: {keys})", source, record, dotted)
    return node


def require_str(value: Any, *, source: str, record: Any, field: str, allow_empty: bool = False) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise DataError(f"expected a string, got {type(value).__name__}", source, record, field)
    if not allow_empty and not value.strip():
        raise DataError("empty string", source, record, field)
    return value
