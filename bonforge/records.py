"""Reading JSONL / Parquet records with errors that name the file, the record and the field."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any, Iterator

from bonforge.errors import DataError

_MISSING = object()


def read_records(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number_or_row, record)``; a malformed line raises ``DataError`` naming it."""
    if path.suffix in (".parquet", ".arrow"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        batches = (pq.ParquetFile(path).iter_batches(65_536) if path.suffix == ".parquet"
                   else pa.ipc.open_stream(pa.memory_map(str(path))))  # fmt: skip
        i = 0
        for batch in batches:
            for rec in batch.to_pylist():
                yield i, rec
                i += 1
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
    """``rec['a']['b']`` for ``'a.b'``, also through a field holding a JSON object as a string (LiveCodeBench's
    ``metadata.func_name``); a missing field raises ``DataError`` unless a default is given."""
    node: Any = rec
    for part in dotted.split("."):
        if isinstance(node, str) and node.lstrip().startswith("{"):
            try:
                node = json.loads(node)
            except ValueError:
                raise DataError("not valid JSON", source, record, dotted) from None
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


_SHARD = re.compile(r"^(.+?)-\d+-of-\d+")  # train-00000-of-00039[-<hash>]


def dataset_files(path: Path, files: str | None = None, split: str | None = None) -> list[Path]:
    """The files of a table: ``path`` itself, the ``files`` glob inside it, or a local Hugging Face dataset
    directory: ``save_to_disk`` output (``state.json`` + Arrow files, ``dataset_dict.json`` for several
    splits) or hub-style Parquet shards (``data/<split>-00000-of-00002.parquet``). Without ``split``: the
    only split, else ``train``."""
    if path.is_file():
        return [path]
    if files:
        found = sorted(p for p in path.glob(files) if p.is_file())
        if not found:
            raise DataError(f"no file matches {files!r}", str(path))
        return found
    if (path / "dataset_dict.json").is_file():
        splits = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
        return dataset_files(path / _pick_split(splits, split, path))
    if (path / "state.json").is_file():
        state = json.loads((path / "state.json").read_text())
        return [path / f["filename"] for f in state.get("_data_files", [])]
    shards = sorted(path.rglob("*.parquet"))
    if not shards:
        raise DataError("no Parquet shards, state.json or dataset_dict.json in this directory", str(path))
    split_of = {p: (m.group(1) if (m := _SHARD.match(p.stem)) else p.parent.name) for p in shards}
    chosen = _pick_split(sorted(set(split_of.values())), split, path)
    return [p for p in shards if split_of[p] == chosen]


def _pick_split(splits: list[str], split: str | None, path: Path) -> str:
    if split is None and len(splits) == 1:
        return splits[0]
    want = split or "train"
    if want not in splits:
        raise DataError(f"no split {want!r} (splits: {', '.join(splits) or 'none'}); set problems.split", str(path))
    return want
