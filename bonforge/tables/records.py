"""Reading JSONL / Parquet records with errors that name the file, the record and the field."""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from bonforge.errors import DataError

_MISSING = object()
MAX_JSON_DEPTH = 100  # no table's tests or metadata nest deeper; deeper data raised RecursionError somewhere


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # \ud800-\udfff: half of a pair, or a lone one


def load_json(text: str | bytes) -> Any:
    """``json.loads`` for data from a table: anything it cannot read, nesting deeper than
    ``MAX_JSON_DEPTH``, integers past Python's digit limit and escaped lone surrogates (a string no
    Arrow column can hold) raise ``ValueError`` (never ``RecursionError``), so every caller reports one
    error line."""
    try:
        doc = json.loads(text)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    check_strings = bool(_SURROGATE_ESCAPE.search(text if isinstance(text, str) else text.decode("utf-8", "replace")))
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (list, dict)):
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
            if check_strings and isinstance(node, dict):
                stack.extend((key, depth) for key in node)
        elif check_strings and isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"a lone surrogate ({node[e.start]!r}) in a string: not valid Unicode") from None
    return doc


def json_error(e: ValueError) -> str:
    """What is wrong with a JSON text, for an error line."""
    if isinstance(e, json.JSONDecodeError):
        return f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
    return f"not valid JSON ({e})"


@dataclass(frozen=True)
class ByteLimits:
    """How much a table file may hold (a source's ``max_line_mib`` and ``max_input_gib``): ``line``, the bytes
    of one JSONL line; ``total``, the bytes of a file after decompression (JSONL, gzipped or not) or as its
    Parquet footer states them uncompressed. Past either, the read stops with one error naming the file and
    the line; memory stays within about ``line`` bytes whatever the file holds."""

    line: int = 64 << 20
    total: int = 64 << 30


_CHUNK = 1 << 20  # bytes read (decompressed) at a time


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n < 1 << 30 else f"{n / (1 << 30):g} GiB"


def _lines(f, path: Path, limits: ByteLimits) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes)`` of each line of a binary stream, read in bounded chunks (never a whole line
    of unknown length at once)."""
    src = str(path)
    lineno, total, head = 1, 0, bytearray()
    while chunk := f.read(_CHUNK):
        total += len(chunk)
        parts = chunk.split(b"\n")
        for part in parts[:-1]:
            if len(head) + len(part) > limits.line:
                break
            if head:
                head += part
                part = bytes(head)
                head.clear()
            yield lineno, part
            lineno += 1
        else:
            part = parts[-1]
        if len(head) + len(part) > limits.line:
            raise DataError(f"a line longer than {_mib(limits.line)} (the source's max_line_mib)", src,
                            f"line {lineno}")
        head += part
        if total > limits.total:
            raise DataError(f"more than {_mib(limits.total)} of data (decompressed; the source's max_input_gib)",
                            src, f"line {lineno}")
    if head:
        yield lineno, bytes(head)


def read_records(path: Path, limits: ByteLimits | None = None) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number_or_row, record)``; a malformed line, a line or file past ``limits`` (default
    ``ByteLimits()``), or a file that cannot be read (corrupt Parquet, Arrow or gzip), raises ``DataError``
    naming the file and the record where it stopped."""
    last = None
    try:
        for last, rec in _records(path, limits or ByteLimits()):
            yield last, rec
    except DataError:
        raise
    except (OSError, EOFError, ValueError, zlib.error) as e:  # pyarrow's ArrowInvalid is a ValueError
        label = "row" if path.suffix in (".parquet", ".arrow") else "line"
        raise DataError(f"cannot read the file ({type(e).__name__}: {' '.join(str(e).split())[:300]})", str(path),
                        None if last is None else f"after {label} {last}") from None


def _records(path: Path, limits: ByteLimits) -> Iterator[tuple[int, dict]]:
    if path.suffix in (".parquet", ".arrow"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        if path.suffix == ".parquet":
            meta = pq.ParquetFile(path).metadata
            size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
            if size > limits.total:
                raise DataError(f"{_mib(size)} of data uncompressed, more than {_mib(limits.total)} (the source's "
                                f"max_input_gib)", str(path))  # fmt: skip
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
        for lineno, raw in _lines(f, path, limits):
            if not raw.strip():
                continue
            try:
                rec = load_json(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise DataError(f"invalid UTF-8 at byte {e.start}", str(path), f"line {lineno}") from None
            except ValueError as e:
                raise DataError(json_error(e), str(path), f"line {lineno}") from None
            if not isinstance(rec, dict):
                raise DataError(f"expected a JSON object, got {type(rec).__name__}", str(path), f"line {lineno}")
            yield lineno, rec


_INDEX = re.compile(r"^-?[0-9]{1,9}$")


def get_field(rec: dict, dotted: str, *, source: str = "", record: Any = None, default: Any = _MISSING) -> Any:
    """``rec['a']['b']`` for ``'a.b'`` (``'a.0'``, ``'a.-1'``: an item of a list by position), also through
    a field holding a JSON object as a string (LiveCodeBench's
    ``metadata.func_name``); a missing field raises ``DataError`` unless a default is given."""
    node: Any = rec
    for part in dotted.split("."):
        if isinstance(node, str) and node.lstrip().startswith("{"):
            try:
                node = load_json(node)
            except ValueError as e:
                raise DataError(json_error(e), source, record, dotted) from None
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and _INDEX.match(part) and -len(node) <= int(part) < len(node):
            node = node[int(part)]  # a list item by position, e.g. messages.-1.content (the last message)
        else:
            if default is not _MISSING:
                return default
            keys = ", ".join(sorted(rec)[:12]) if isinstance(rec, dict) else ""
            raise DataError(f"missing field (record has: {keys})", source, record, dotted)
    return node


MISSING_MARKERS = {"nan", "<na>", "nat"}  # what pandas writes for a missing value as text (str(nan), pd.NA, NaT)


def missing_value(value: Any) -> str | None:
    """Why ``value`` is a missing value rather than data (``None``, a NaN or infinite float, pandas' text for a
    missing value), or ``None`` when it is data."""
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} (a missing value, not a number)"
    if isinstance(value, str) and value.strip().lower() in MISSING_MARKERS:
        return f"{value.strip()!r} (a missing value's text)"
    return None


def require_str(value: Any, *, source: str, record: Any, field: str, allow_empty: bool = False) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        raise DataError(f"expected a string, got {value} (a missing value?)", source, record, field)
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
        splits = _json_file(path / "dataset_dict.json", "splits", lambda v: isinstance(v, list)
                            and all(isinstance(x, str) and _plain_name(x) for x in v), "a list of split names")
        return dataset_files(path / _pick_split(splits, split, path))
    if (path / "state.json").is_file():
        files = _json_file(path / "state.json", "_data_files", lambda v: isinstance(v, list) and all(
            isinstance(f, dict) and isinstance(f.get("filename"), str) and _plain_name(f["filename"]) for f in v),
            "a list of {filename} objects naming files in this directory")  # fmt: skip
        found = [path / f["filename"] for f in files]
        for f in found:
            if not f.is_file():
                raise DataError(f"names {f.name!r}, which is not a file here", str(path / "state.json"), None,
                                "_data_files")
        return found
    shards = sorted(path.rglob("*.parquet"))
    if not shards:
        raise DataError("no Parquet shards, state.json or dataset_dict.json in this directory", str(path))
    split_of = {p: (m.group(1) if (m := _SHARD.match(p.stem)) else p.parent.name) for p in shards}
    chosen = _pick_split(sorted(set(split_of.values())), split, path)
    return [p for p in shards if split_of[p] == chosen]


def _plain_name(name: str) -> bool:
    """A file or folder name inside the dataset's directory (no path leading out of it)."""
    return name not in ("", ".", "..") and "/" not in name and "\\" not in name and "\0" not in name


def _json_file(path: Path, key: str, ok, shape: str) -> Any:
    """``key`` of the JSON object in ``path``, checked by ``ok``; anything else is an error naming them."""
    try:
        doc = load_json(path.read_bytes())
    except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
        raise DataError(json_error(e) if isinstance(e, ValueError) else f"cannot read ({e})", str(path)) from None
    if not isinstance(doc, dict) or not ok(doc.get(key)):
        raise DataError(f"expected {shape}", str(path), None, key)
    return doc[key]


def _pick_split(splits: list[str], split: str | None, path: Path) -> str:
    if split is None and len(splits) == 1:
        return splits[0]
    want = split or "train"
    if want not in splits:
        raise DataError(f"no split {want!r} (splits: {', '.join(splits) or 'none'}); set problems.split", str(path))
    return want
