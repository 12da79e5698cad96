"""The content-addressed stage store.

Layout::

    <root>/stages/<stage>/<key>/part-<shard>.parquet   one file per shard, written to a temp name and renamed
    <root>/stages/<stage>/<key>/plan.json              the shard plan the part files belong to
    <root>/stages/<stage>/<key>/manifest.json          written last; a stage without it does not exist
    <root>/runs/<run_id>.json                          one record per run

``key = hash(stage name, stage code version, normalized config, upstream keys)`` (``bonforge.keys``), derived
from a stage's declaration (``bonforge.stage``); execution-only settings are not part of it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bonforge.errors import StoreError
from bonforge.keys import canonical_json

_PART = re.compile(r"^part-(\d{5})\.parquet$")
_TEMP = re.compile(r"^\..+\.tmp-(?P<host>.+)-(?P<pid>\d+)$")  # what _temp_path names
log = logging.getLogger("bonforge")


def utc_now() -> str:
    """An ISO timestamp with microseconds: runs started within one second still sort in order."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_run_id() -> str:
    import uuid

    return time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


def _temp_path(path: Path) -> Path:
    """A hidden temp name beside ``path``, naming the writer (host and pid) so that the leftovers of a
    crashed writer can be told from a live one's."""
    return path.with_name(f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}")


def _remove_dead_temps(folder: Path) -> None:
    """Remove temp files in ``folder`` left by writers on this host that no longer run."""
    host = socket.gethostname()
    for p in folder.iterdir():
        m = _TEMP.match(p.name)
        if not m or m["host"] != host:
            continue
        try:
            os.kill(int(m["pid"]), 0)
            continue  # alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # alive, another user's
        p.unlink(missing_ok=True)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_path(path)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def write_parquet_atomic(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_path(path)
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class StageStore:
    """Reads and writes stage outputs under ``root``. Safe for concurrent readers during writes."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).resolve()

    # -- paths -------------------------------------------------------------------------------------
    def stage_dir(self, stage: str, key: str) -> Path:
        return self.root / "stages" / stage / key

    def shard_path(self, stage: str, key: str, shard: int) -> Path:
        return self.stage_dir(stage, key) / f"part-{shard:05d}.parquet"

    # -- queries -----------------------------------------------------------------------------------
    def exists(self, stage: str, key: str) -> bool:
        return (self.stage_dir(stage, key) / "manifest.json").is_file()

    def manifest(self, stage: str, key: str) -> dict:
        path = self.stage_dir(stage, key) / "manifest.json"
        if not path.is_file():
            raise StoreError(f"stage {stage!r} with key {key} is not committed in {self.root}")
        return json.loads(path.read_text())

    def done_shards(self, stage: str, key: str) -> set[int]:
        d = self.stage_dir(stage, key)
        if not d.is_dir():
            return set()
        return {int(m.group(1)) for p in d.iterdir() if (m := _PART.match(p.name))}

    def paths(self, stage: str, key: str) -> list[Path]:
        man = self.manifest(stage, key)
        return [self.stage_dir(stage, key) / name for name in man["files"]]

    def read(self, stage: str, key: str, columns: list[str] | None = None) -> pa.Table:
        paths = self.paths(stage, key)
        tables = [pq.read_table(p, columns=columns) for p in paths]
        if not tables:
            raise StoreError(f"stage {stage!r} {key} has no files")
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        return table.replace_schema_metadata()  # per-shard notes (e.g. genselect's dropped_too_long) stay there

    def read_shards(self, stage: str, key: str, n_shards: int, columns: list[str] | None = None) -> pa.Table:
        """The shards of a stage being committed (for manifest summaries)."""
        return pa.concat_tables(
            [pq.read_table(self.shard_path(stage, key, i), columns=columns) for i in range(n_shards)]
        )

    # -- writes ------------------------------------------------------------------------------------
    def begin(self, stage: str, key: str, shard_rows: list[int]) -> set[int]:
        """Start or resume computing a stage split into shards of ``shard_rows`` rows: returns the shards
        already written under that same plan. Part files of another plan (a crash, then a rerun that splits
        the input differently) are removed, and so are temp files of dead writers on this host."""
        rows_sha256 = hashlib.sha256(canonical_json(shard_rows).encode()).hexdigest()
        plan = {"shards": len(shard_rows), "rows_sha256": rows_sha256}
        d = self.stage_dir(stage, key)
        d.mkdir(parents=True, exist_ok=True)
        _remove_dead_temps(d)
        path = d / "plan.json"
        old = json.loads(path.read_text()) if path.is_file() else None
        if old != plan:
            stale = [p for p in d.iterdir() if _PART.match(p.name)]
            if stale:
                log.info("%s: %d shards of an earlier run follow another shard plan: recomputing", stage, len(stale))
            for p in stale:
                p.unlink()
            atomic_write_json(path, plan)
        return self.done_shards(stage, key)

    def write_shard(self, stage: str, key: str, shard: int, table: pa.Table) -> int:
        write_parquet_atomic(table, self.shard_path(stage, key, shard))
        return table.num_rows

    def commit(
        self,
        stage: str,
        key: str,
        n_shards: int,
        *,
        version: str,
        config: Any,
        upstream: dict[str, str],
        timings: dict[str, float] | None = None,
        extra: dict[str, Any] | None = None,
        compact_rows: int | None = None,
    ) -> dict:
        """Write the manifest after checking that every shard 0..n_shards-1 is on disk. With
        ``compact_rows``, consecutive shards are first concatenated into files of about that many rows."""
        missing = sorted(set(range(n_shards)) - self.done_shards(stage, key))
        if missing:
            raise StoreError(f"cannot commit {stage} {key}: shards {missing[:5]} are missing")
        files = [self.shard_path(stage, key, i) for i in range(n_shards)]
        if compact_rows and n_shards > 1:
            files = self._compact(stage, key, files, compact_rows)
        rows = [pq.ParquetFile(f).metadata.num_rows for f in files]
        schema = pq.read_schema(files[0]) if files else None
        manifest = {
            "stage": stage,
            "key": key,
            "version": version,
            "config": config,
            "upstream": upstream,
            "files": [f.name for f in files],
            "rows": sum(rows),
            "rows_per_file": rows,
            "schema": [f"{f.name}: {f.type}" for f in schema] if schema else [],
            "timings": timings or {},
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **(extra or {}),
        }
        atomic_write_json(self.stage_dir(stage, key) / "manifest.json", manifest)
        return manifest

    def _compact(self, stage: str, key: str, parts: list[Path], rows_per_file: int) -> list[Path]:
        """Concatenate consecutive shards into ``data-*.parquet`` files of about ``rows_per_file`` rows: what
        readers read (thousands of small shards make every scan slow). The part files stay: they are the
        record of done shards while the stage is not committed."""
        out: list[Path] = []
        group: list[Path] = []
        rows = 0
        for i, part in enumerate(parts):
            group.append(part)
            rows += pq.ParquetFile(part).metadata.num_rows
            if rows >= rows_per_file or i == len(parts) - 1:
                path = self.stage_dir(stage, key) / f"data-{len(out):05d}.parquet"
                write_parquet_atomic(pa.concat_tables([pq.read_table(p) for p in group]), path)
                out.append(path)
                group, rows = [], 0
        return out

    def put(self, stage: str, key: str, table: pa.Table, **commit_kwargs) -> dict:
        """Write a whole (unsharded) table as one shard and commit it."""
        self.write_shard(stage, key, 0, table)
        return self.commit(stage, key, 1, **commit_kwargs)

    # -- runs --------------------------------------------------------------------------------------
    def record_run(self, run: dict) -> Path:
        path = self.root / "runs" / f"{run['run_id']}.json"
        atomic_write_json(path, run)
        return path

    def runs(self) -> list[dict]:
        d = self.root / "runs"
        if not d.is_dir():
            return []
        out = [json.loads(p.read_text()) for p in d.glob("*.json")]
        return sorted(out, key=lambda r: (r.get("started", ""), r["run_id"]))

    def run(self, run_id: str | None = None) -> dict:
        """The run ``run_id`` (a prefix will do); by default the latest that succeeded (a run still in
        progress has not recorded its stages yet), else the latest."""
        runs = self.runs()
        if not runs:
            raise StoreError(f"no runs recorded in {self.root}; run `bonforge run RECIPE` first")
        if run_id is None:
            return next((r for r in reversed(runs) if r.get("status") == "succeeded"), runs[-1])
        for r in runs:
            if r["run_id"] == run_id or r["run_id"].startswith(run_id):
                return r
        raise StoreError(f"no run {run_id!r} in {self.root}; `bonforge runs` lists them")

