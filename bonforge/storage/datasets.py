"""Immutable, versioned datasets: ``<store>/datasets/<name>/v<N>/{<format>/train.parquet, manifest.json}``.

A version is written into a hidden temporary folder first. Its content hash (over the files' sha256)
decides the version: identical content reuses the existing version; anything else becomes v<N+1>.
Nothing ever rewrites a published version, and two builds racing for v<N> never both get it:

- in a local store the folder is renamed into place when complete (a rename onto an existing version
  fails, and the loser takes the next number);
- in an S3 store (no rename) the number is claimed first with a conditional create of
  ``datasets/<name>/.claims/v<N>`` (``If-None-Match: *``: exactly one writer's create succeeds), then the
  files are uploaded and ``manifest.json`` last. A version exists for readers once its manifest does; a
  writer that died after its claim leaves a number that is never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from bonforge.storage.fs import Location, S3Prefix, atomic_write_json, json_bytes, open_location, sha256_file


def _versions(loc: Location, name: str) -> list[int]:
    """The version numbers of dataset ``name`` (on S3: the claimed ones, published or not)."""
    folder = loc.path("datasets", name, ".claims") if loc.remote else loc.path("datasets", name)
    return sorted(int(n[1:]) for n in loc.names(folder) if n.startswith("v") and n[1:].isdigit())


def _manifest(loc: Location, name: str, version: int) -> dict | None:
    """The manifest of a published version (None for a claimed number that was never published)."""
    try:
        return json.loads(loc.read_bytes(loc.path("datasets", name, f"v{version}", "manifest.json")))
    except FileNotFoundError:
        return None


def publish(root, name: str, tables: dict[str, pa.Table] | Iterable[dict[str, pa.Table]], lineage: dict,
            trainers: dict | None = None) -> dict:
    """Write ``tables`` (format → table, or a stream of such parts appended in turn, so that at most two
    parts are in memory: one being written, the next being read) into the store at ``root`` as a new
    version unless identical content exists; returns its manifest. ``trainers`` (what each trainer needs:
    reward function, overrides; see ``bonforge.storage.export``) is part of the content."""
    loc = open_location(root)
    base = loc.path("datasets", name)
    if loc.remote:
        tmp = Path(tempfile.mkdtemp(prefix="bonforge-dataset-"))
    else:
        base.mkdir(parents=True, exist_ok=True)
        tmp = base / f".tmp-{os.getpid()}-{time.time_ns()}"
    try:
        rows = _write(tmp, [tables] if isinstance(tables, dict) else tables)
        files = {
            f"{fmt}/train.parquet": {"sha256": sha256_file(tmp / fmt / "train.parquet"), "rows": rows[fmt]}
            for fmt in sorted(rows)
        }
        described = {"files": files, "trainers": trainers} if trainers else files
        content = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()
        for v in reversed(_versions(loc, name)):
            man = _manifest(loc, name, v)
            if man and man["content_sha256"] == content:
                man["reused"], man["path"] = True, str(loc.path("datasets", name, f"v{v}"))
                return man
        manifest = {
            "name": name,
            "version": (_versions(loc, name) or [0])[-1] + 1,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "content_sha256": content,
            "files": files,
            **({"trainers": trainers} if trainers else {}),
            **lineage,
        }
        version = _upload(loc, name, tmp, manifest) if loc.remote else _rename(base, tmp, manifest)
        manifest["reused"] = False
        manifest["path"] = str(loc.path("datasets", name, f"v{version}"))
        return manifest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write(folder: Path, parts: Iterable[dict[str, pa.Table]]) -> dict[str, int]:
    """Append each part's tables to ``<folder>/<format>/train.parquet``; returns the rows per format. The
    formats of a part are written side by side on threads while the next part is prepared (Arrow
    releases the GIL while it encodes and compresses); each file gets its parts in order."""
    writers: dict[str, pq.ParquetWriter] = {}
    rows: dict[str, int] = {}
    pending: list = []
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:  # leaving it waits for the writes in flight
            for part in parts:
                for done in pending:
                    done.result()
                for fmt, table in part.items():
                    if fmt not in writers:
                        (folder / fmt).mkdir(parents=True)
                        path = folder / fmt / "train.parquet"
                        writers[fmt] = pq.ParquetWriter(path, table.schema, compression="zstd")
                    rows[fmt] = rows.get(fmt, 0) + table.num_rows
                pending = [pool.submit(writers[fmt].write_table, table) for fmt, table in part.items()]
            for done in pending:
                done.result()
    finally:
        for writer in writers.values():
            writer.close()
    return rows


def _rename(base: Path, tmp: Path, manifest: dict) -> int:
    """Rename the complete folder ``tmp`` to the first free ``v<N>`` from the manifest's version on."""
    while True:  # a concurrent writer may take the number first: then take the next one
        atomic_write_json(tmp / "manifest.json", manifest)
        try:
            os.rename(tmp, base / f"v{manifest['version']}")
            return manifest["version"]
        except OSError:
            manifest["version"] += 1


def _upload(loc: S3Prefix, name: str, tmp: Path, manifest: dict) -> int:
    """Claim the first free ``v<N>`` from the manifest's version on, then upload the files, manifest last."""
    while not loc.create(loc.path("datasets", name, ".claims", f"v{manifest['version']}"), json_bytes(manifest)):
        manifest["version"] += 1
    folder = ("datasets", name, f"v{manifest['version']}")
    for rel in manifest["files"]:
        with open(tmp / rel, "rb") as f, loc.fs.open_output_stream(loc.key(loc.path(*folder, rel))) as out:
            shutil.copyfileobj(f, out, 1 << 22)
    loc.write_bytes(loc.path(*folder, "manifest.json"), json_bytes(manifest))
    return manifest["version"]


def published(root) -> list[dict]:
    """The manifest of every published dataset version in the store at ``root`` (with its ``path``), by name
    and version; a claimed number that was never published is left out."""
    loc = open_location(root)
    out = []
    for name in sorted(loc.names(loc.path("datasets"))):
        if name.startswith("."):
            continue
        for v in _versions(loc, name):
            man = _manifest(loc, name, v)
            if man is not None:
                out.append({**man, "path": str(loc.path("datasets", name, f"v{v}"))})
    return out
