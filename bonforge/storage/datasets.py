"""Immutable, versioned datasets: ``<store>/datasets/<name>/v<N>/{<format>/train.parquet, manifest.json}``.

A version is written into a hidden temporary folder and renamed into place only when complete. Its
content hash (over the files' sha256) decides the version: identical content reuses the existing
version; anything else becomes v<N+1>. Nothing ever rewrites a published version.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from bonforge.storage.store import atomic_write_json, sha256_file


def _versions(base: Path) -> list[int]:
    if not base.is_dir():
        return []
    return sorted(int(p.name[1:]) for p in base.iterdir() if p.name.startswith("v") and p.name[1:].isdigit())


def publish(
    root: Path,
    name: str,
    tables: dict[str, pa.Table] | Iterable[dict[str, pa.Table]],
    lineage: dict,
    trainers: dict | None = None,
) -> dict:
    """Write ``tables`` (format → table, or a stream of such parts appended in turn, so that only one part
    is in memory) as a new version unless identical content exists; returns its manifest. ``trainers``
    (what each trainer needs: reward function, overrides; see ``tasks.export.trainers``) is part of the
    content."""
    base = Path(root) / "datasets" / name
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / f".tmp-{os.getpid()}-{time.time_ns()}"
    try:
        writers: dict[str, pq.ParquetWriter] = {}
        rows: dict[str, int] = {}
        try:
            for part in [tables] if isinstance(tables, dict) else tables:
                for fmt, table in part.items():
                    if fmt not in writers:
                        (tmp / fmt).mkdir(parents=True)
                        writers[fmt] = pq.ParquetWriter(tmp / fmt / "train.parquet", table.schema, compression="zstd")
                    writers[fmt].write_table(table)
                    rows[fmt] = rows.get(fmt, 0) + table.num_rows
        finally:
            for writer in writers.values():
                writer.close()
        files = {
            f"{fmt}/train.parquet": {"sha256": sha256_file(tmp / fmt / "train.parquet"), "rows": rows[fmt]}
            for fmt in sorted(writers)
        }
        described = {"files": files, "trainers": trainers} if trainers else files
        content = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()
        for v in reversed(_versions(base)):
            man = json.loads((base / f"v{v}" / "manifest.json").read_text())
            if man["content_sha256"] == content:
                man["reused"], man["path"] = True, str(base / f"v{v}")
                return man
        version = (_versions(base) or [0])[-1] + 1
        manifest = {
            "name": name,
            "version": version,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "content_sha256": content,
            "files": files,
            **({"trainers": trainers} if trainers else {}),
            **lineage,
        }
        atomic_write_json(tmp / "manifest.json", manifest)
        while True:  # a concurrent writer may take the number first: then take the next one
            try:
                os.rename(tmp, base / f"v{version}")
                break
            except OSError:
                version += 1
                manifest["version"] = version
                atomic_write_json(tmp / "manifest.json", manifest)
        manifest["reused"] = False
        manifest["path"] = str(base / f"v{version}")
        return manifest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def latest(root: Path, name: str) -> Path | None:
    base = Path(root) / "datasets" / name
    versions = _versions(base)
    return base / f"v{versions[-1]}" if versions else None
