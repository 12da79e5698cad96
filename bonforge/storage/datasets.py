"""Immutable, versioned datasets: ``<store>/datasets/<name>/v<N>/{<format>/<split>.parquet, manifest.json,
README.md}`` and ``<store>/datasets/<name>/latest``, the version the last build of that name published or reused.

The split is ``train``, and ``validation`` where the recipe asks (``bonforge.storage.splits``); ``README.md``
is the dataset card (``bonforge.storage.card``), written from the manifest. ``latest`` is a symbolic link
to ``v<N>`` in a local store (so ``datasets/<name>/latest/verl/train.parquet`` is a path) and an object
holding ``v<N>`` on S3; it is written beside and renamed over the old one (on S3 an upload replaces an
object whole): a reader sees the old version or the new one.

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
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bonforge.config_model import check_name
from bonforge.errors import StoreError
from bonforge.storage import card
from bonforge.storage.fs import (Location, S3Prefix, atomic_write_bytes, atomic_write_json, json_bytes, open_location,
                                 sha256_file)
from bonforge.storage.splits import Split
from bonforge.tables.cost import dataset_rows, per_kept_row


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
            trainers: dict | None = None, validation: Split | None = None) -> dict:
    """Write ``tables`` (format → table, or a stream of such parts appended in turn, so that at most two
    parts are in memory: one being written, the next being read) into the store at ``root`` as a new
    version unless identical content exists, and point ``latest`` at it; returns its manifest. ``trainers``
    (what each trainer needs: reward function, overrides; see ``bonforge.storage.export``) is part of the
    content; ``validation``: the rows of some problems go to ``<format>/validation.parquet``."""
    loc = open_location(root)
    base = loc.path("datasets", check_name(name, "a dataset name"))
    twin = [n for n in loc.names(loc.path("datasets")) if n != name and n.lower() == name.lower()]
    if twin:
        raise StoreError(f"dataset {name!r}: the store holds {twin[0]!r}, the same folder on a filesystem that "
                         "ignores case (macOS, Windows): publish under that name or another")
    if loc.remote:
        tmp = Path(tempfile.mkdtemp(prefix="bonforge-dataset-"))
    else:
        base.mkdir(parents=True, exist_ok=True)
        tmp = base / f".tmp-{os.getpid()}-{time.time_ns()}"
    try:
        rows = _write(tmp, [tables] if isinstance(tables, dict) else tables, validation)
        for rel in [r for r, n in rows.items() if not n and r.endswith("/validation.parquet")]:
            (tmp / rel).unlink()  # a split without rows is left out (`datasets` refuses to load one)
            del rows[rel]
        files = {rel: {"sha256": sha256_file(tmp / rel), "rows": rows[rel]} for rel in sorted(rows)}
        described = {"files": files, "trainers": trainers} if trainers else files
        content = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()
        for v in reversed(_versions(loc, name)):
            man = _manifest(loc, name, v)
            if man and man["content_sha256"] == content:
                point_latest(loc, name, v)
                man["reused"], man["path"] = True, str(loc.path("datasets", name, f"v{v}"))
                return man
        if isinstance(lineage.get("summary", {}).get("cost"), dict):  # what one of its rows cost
            lineage = {**lineage, "summary": {**lineage["summary"], "cost": per_kept_row(
                lineage["summary"]["cost"], dataset_rows(files))}}
        manifest = {
            "name": name,
            "version": (_versions(loc, name) or [0])[-1] + 1,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "content_sha256": content,
            "files": files,
            **({"trainers": trainers} if trainers else {}),
            **lineage,
        }
        schemas = {rel.split("/", 1)[0]: pq.read_schema(tmp / rel) for rel in files}
        version = _upload(loc, name, tmp, manifest, schemas) if loc.remote else _rename(base, tmp, manifest, schemas)
        point_latest(loc, name, version)
        manifest["reused"] = False
        manifest["path"] = str(loc.path("datasets", name, f"v{version}"))
        return manifest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _split(part: dict[str, pa.Table], validation: Split | None) -> dict[str, pa.Table]:
    """A part's tables by file: ``<format>/train.parquet`` (and ``<format>/validation.parquet``)."""
    if validation is None:
        return {f"{fmt}/train.parquet": table for fmt, table in part.items()}
    out = {}
    for fmt, table in part.items():
        mask = validation.mask(table)
        out[f"{fmt}/train.parquet"] = table.filter(pc.invert(mask))
        out[f"{fmt}/validation.parquet"] = table.filter(mask)
    return out


def _write(folder: Path, parts: Iterable[dict[str, pa.Table]], validation: Split | None = None) -> dict[str, int]:
    """Append each part's tables to ``<folder>/<format>/<split>.parquet``; returns the rows per file. The
    files of a part are written side by side on threads while the next part is prepared (Arrow releases
    the GIL while it encodes and compresses); each file gets its parts in order."""
    writers: dict[str, pq.ParquetWriter] = {}
    rows: dict[str, int] = {}
    pending: list = []
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:  # leaving it waits for the writes in flight
            for part in parts:
                for done in pending:
                    done.result()
                part = _split(part, validation)
                for rel, table in part.items():
                    if rel not in writers:
                        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                        writers[rel] = pq.ParquetWriter(folder / rel, table.schema, compression="zstd")
                    rows[rel] = rows.get(rel, 0) + table.num_rows
                pending = [pool.submit(writers[rel].write_table, table) for rel, table in part.items()]
            for done in pending:
                done.result()
    finally:
        for writer in writers.values():
            writer.close()
    return rows


def _rename(base: Path, tmp: Path, manifest: dict, schemas: dict[str, pa.Schema]) -> int:
    """Rename the complete folder ``tmp`` to the first free ``v<N>`` from the manifest's version on."""
    while True:  # a concurrent writer may take the number first: then take the next one
        atomic_write_bytes(tmp / "README.md", card.render(manifest, schemas).encode())
        atomic_write_json(tmp / "manifest.json", manifest)
        try:
            os.rename(tmp, base / f"v{manifest['version']}")
            return manifest["version"]
        except OSError:
            manifest["version"] += 1


def _upload(loc: S3Prefix, name: str, tmp: Path, manifest: dict, schemas: dict[str, pa.Schema]) -> int:
    """Claim the first free ``v<N>`` from the manifest's version on, then upload the files, manifest last."""
    while not loc.create(loc.path("datasets", name, ".claims", f"v{manifest['version']}"), json_bytes(manifest)):
        manifest["version"] += 1
    folder = ("datasets", name, f"v{manifest['version']}")
    for rel in manifest["files"]:
        with open(tmp / rel, "rb") as f, loc.fs.open_output_stream(loc.key(loc.path(*folder, rel))) as out:
            shutil.copyfileobj(f, out, 1 << 22)
    loc.write_bytes(loc.path(*folder, "README.md"), card.render(manifest, schemas).encode())
    loc.write_bytes(loc.path(*folder, "manifest.json"), json_bytes(manifest))
    return manifest["version"]


# -- latest, and the list of datasets --------------------------------------------------------------------------
def point_latest(loc: Location, name: str, version: int) -> None:
    """``datasets/<name>/latest`` names ``v<version>`` (replaced whole: never a half-written pointer)."""
    target = f"v{version}"
    if loc.remote:
        loc.write_bytes(loc.path("datasets", name, "latest"), f"{target}\n".encode())
        return
    link = loc.path("datasets", name, "latest")
    tmp = link.with_name(f".latest-{os.getpid()}-{time.time_ns()}")
    os.symlink(target, tmp)
    os.replace(tmp, link)


def latest(root, name: str) -> int | None:
    """The version ``datasets/<name>/latest`` names, or None."""
    loc = open_location(root)
    link = loc.path("datasets", name, "latest")
    try:
        target = loc.read_bytes(link).decode().strip() if loc.remote else os.readlink(link)
    except (FileNotFoundError, OSError):
        return None
    return int(target[1:]) if target.startswith("v") and target[1:].isdigit() else None


def listing(root, name: str | None = None) -> list[dict]:
    """Every published version (of dataset ``name``, or of all), newest first per name: name, version,
    created, recipe, its default config (format) and its rows per split, whether ``latest`` names it, its path."""
    loc = open_location(root)
    names = [check_name(name, "a dataset name")] if name else sorted(loc.names(loc.path("datasets")))
    out = []
    for n in names:
        pointer = latest(loc, n)
        for v in reversed(_versions(loc, n)):
            man = _manifest(loc, n, v)
            if man is None:
                continue
            config, files = next(iter(card.configs(man).items()), (None, {}))
            out.append({"name": n, "version": v, "created": man.get("created"), "recipe": man.get("recipe"),
                        "config": config, "rows": {split: man["files"][rel]["rows"] for split, rel in files.items()},
                        "latest": v == pointer, "path": str(loc.path("datasets", n, f"v{v}"))})
    return out
