"""The content-addressed stage store.

Layout (under a local folder or an S3 prefix, see ``bonforge.storage.fs``)::

    <root>/stages/<stage>/<key>/part-<shard>.parquet   one file per shard, never visible half-written
    <root>/stages/<stage>/<key>/plan.json              the shard plan the part files belong to
    <root>/stages/<stage>/<key>/manifest.json          written last; a stage without it does not exist
    <root>/runs/<run_id>.json                          one record per run
    <root>/prefect-results/                            Prefect's task results (the stage manifests)

``key = hash(stage name, stage code version, normalized config, upstream keys)`` (``bonforge.keys``), derived
from a stage's declaration (``bonforge.stage``); execution-only settings are not part of it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bonforge.errors import StoreError, shown
from bonforge.keys import canonical_json
from bonforge.manifest import Manifest
from bonforge.storage.fs import Location, json_bytes, open_location
from bonforge.storage.liveness import settle
from bonforge.storage.run_record import RunRecord


_PART = re.compile(r"^part-(\d{5})\.parquet$")
_PARTIAL = re.compile(r"^partial-(\d{5})\.parquet$")
log = logging.getLogger("bonforge")


class StageStore:
    """Reads and writes stage outputs under ``root`` (a local folder or ``s3://bucket/prefix``). Safe for
    concurrent readers during writes."""

    def __init__(self, root: str | os.PathLike | Location):
        self.loc = open_location(root)
        self.root = self.loc.root  # a Path for a local store, the s3:// URL otherwise

    # -- paths -------------------------------------------------------------------------------------
    def stage_dir(self, stage: str, key: str):
        return self.loc.path("stages", stage, key)

    def shard_path(self, stage: str, key: str, shard: int):
        return self.loc.path("stages", stage, key, f"part-{shard:05d}.parquet")

    def partial_path(self, stage: str, key: str, shard: int):
        """Where the rows made of a shard that could not be made whole wait for its next try (not a done shard)."""
        return self.loc.path("stages", stage, key, f"partial-{shard:05d}.parquet")

    def partials(self, stage: str, key: str) -> list:
        """The partial shards of a stage not committed yet (``partial_path``)."""
        return [self._file(stage, key, name) for name in sorted(self.loc.names(self.stage_dir(stage, key)))
                if _PARTIAL.match(name)]

    def _file(self, stage: str, key: str, name: str):
        return self.loc.path("stages", stage, key, name)

    # -- queries -----------------------------------------------------------------------------------
    def exists(self, stage: str, key: str) -> bool:
        return self.loc.is_file(self._file(stage, key, "manifest.json"))

    def manifest(self, stage: str, key: str) -> Manifest:
        path = self._file(stage, key, "manifest.json")
        try:
            return Manifest.from_json(json.loads(self.loc.read_bytes(path)))
        except FileNotFoundError:
            raise StoreError(f"stage {stage!r} with key {key} is not committed in {self.root}") from None

    def done_shards(self, stage: str, key: str) -> set[int]:
        return {int(m.group(1)) for name in self.loc.names(self.stage_dir(stage, key)) if (m := _PART.match(name))}

    def paths(self, stage: str, key: str) -> list:
        """The committed files of a stage: Paths in a local store, s3:// URIs (which ``duckdb()`` reads)."""
        return [self._file(stage, key, name) for name in self.manifest(stage, key).files]

    def read_file(self, path, columns: list[str] | None = None) -> pa.Table:
        return pq.read_table(self.loc.key(path), columns=columns, filesystem=self.loc.fs)

    def read_schema(self, path) -> pa.Schema:
        return pq.read_schema(self.loc.key(path), filesystem=self.loc.fs)

    def _num_rows(self, path) -> int:
        return pq.read_metadata(self.loc.key(path), filesystem=self.loc.fs).num_rows

    def read(self, stage: str, key: str, columns: list[str] | None = None) -> pa.Table:
        tables = [self.read_file(p, columns) for p in self.paths(stage, key)]
        if not tables:
            raise StoreError(f"stage {stage!r} {key} has no files")
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        return table.replace_schema_metadata()  # per-shard notes (e.g. genselect's dropped_too_long) stay there

    def read_shards(self, stage: str, key: str, n_shards: int, columns: list[str] | None = None) -> pa.Table:
        """The shards of a stage being committed (for manifest summaries)."""
        return pa.concat_tables([self.read_file(self.shard_path(stage, key, i), columns) for i in range(n_shards)])

    def duckdb(self):
        """A DuckDB connection that can read this store's paths."""
        return self.loc.duckdb()

    def result_storage(self):
        """Where Prefect keeps its task results: ``<root>/prefect-results``."""
        if not self.loc.remote:
            return self.loc.path("prefect-results")
        from bonforge.storage.prefect_results import saved  # imports Prefect

        return saved(self.loc.path("prefect-results"))

    # -- writes ------------------------------------------------------------------------------------
    def begin(self, stage: str, key: str, shard_rows: list[int]) -> set[int]:
        """Start or resume computing a stage split into shards of ``shard_rows`` rows: returns the shards
        already written under that same plan. Part files of another plan (a crash, then a rerun that splits
        the input differently) are removed, and so are temp files of dead writers on this host."""
        rows_sha256 = hashlib.sha256(canonical_json(shard_rows).encode()).hexdigest()
        plan = {"shards": len(shard_rows), "rows_sha256": rows_sha256}
        d = self.stage_dir(stage, key)
        self.loc.remove_dead_temps(d)
        path = self._file(stage, key, "plan.json")
        old = json.loads(self.loc.read_bytes(path)) if self.loc.is_file(path) else None
        if old != plan:
            stale = [name for name in self.loc.names(d) if _PART.match(name)]
            if stale:
                log.info("%s: %d shards of an earlier run follow another shard plan: recomputing", stage, len(stale))
            for name in stale:
                self.loc.remove(self._file(stage, key, name))
            self.loc.write_bytes(path, json_bytes(plan))
        return self.done_shards(stage, key)

    def write_shard(self, stage: str, key: str, shard: int, table: pa.Table,
                    notes: dict[bytes, bytes] | None = None) -> int:
        """``notes``: the file's own key-value metadata (``bonforge.storage.fs.write_parquet``)."""
        self.loc.write_parquet(table, self.shard_path(stage, key, shard), notes)
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
    ) -> Manifest:
        """Write the manifest after checking that every shard 0..n_shards-1 is written. With
        ``compact_rows``, consecutive shards are first concatenated into files of about that many rows."""
        missing = sorted(set(range(n_shards)) - self.done_shards(stage, key))
        if missing:
            raise StoreError(f"cannot commit {stage} {key}: shards {missing[:5]} are missing")
        files = [self.shard_path(stage, key, i) for i in range(n_shards)]
        if compact_rows and n_shards > 1:
            files = self._compact(stage, key, files, compact_rows)
        rows = [self._num_rows(f) for f in files]
        schema = self.read_schema(files[0]) if files else None
        manifest = {
            "stage": stage,
            "key": key,
            "version": version,
            "config": config,
            "upstream": upstream,
            "files": [self.loc.key(f).rsplit("/", 1)[-1] for f in files],
            "rows": sum(rows),
            "rows_per_file": rows,
            "schema": [f"{f.name}: {f.type}" for f in schema] if schema else [],
            "timings": timings or {},
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **(extra or {}),
        }
        self.loc.write_bytes(self._file(stage, key, "manifest.json"), json_bytes(manifest))
        for path in self.partials(stage, key):  # their rows are in the done shards now
            self.loc.remove(path)
        return Manifest.from_json(manifest)

    def _compact(self, stage: str, key: str, parts: list, rows_per_file: int) -> list:
        """Concatenate consecutive shards into ``data-*.parquet`` files of about ``rows_per_file`` rows: what
        readers read (thousands of small shards make every scan slow). The part files stay: they are the
        record of done shards while the stage is not committed."""
        out: list = []
        group: list = []
        rows = 0
        for i, part in enumerate(parts):
            group.append(part)
            rows += self._num_rows(part)
            if rows >= rows_per_file or i == len(parts) - 1:
                path = self._file(stage, key, f"data-{len(out):05d}.parquet")
                self.loc.write_parquet(pa.concat_tables([self.read_file(p) for p in group]), path)
                out.append(path)
                group, rows = [], 0
        return out

    def uncommit(self, stage: str, key: str) -> None:
        """Remove a stage output: its manifest first (from then on it does not exist for readers, nor
        for row reuse), then its shard plan (a folder without either is a removal's leftover: ``gc``
        finishes it), then its files."""
        for name in ("manifest.json", "plan.json"):
            self.loc.remove(self._file(stage, key, name))
        for name in self.loc.names(self.stage_dir(stage, key)):
            self.loc.remove(self._file(stage, key, name))

    # -- runs --------------------------------------------------------------------------------------
    def record_run(self, run: RunRecord):
        path = self.loc.path("runs", f"{run.run_id}.json")
        self.loc.write_bytes(path, json_bytes(run.json()))
        return path

    def runs(self) -> list[RunRecord]:
        """Every run record, oldest first; a build recorded as running whose process is gone (killed or
        crashed, on this host) shows as failed (``bonforge.storage.liveness``)."""
        names = [n for n in self.loc.names(self.loc.path("runs")) if n.endswith(".json")]
        out = [RunRecord.from_json(settle(json.loads(self.loc.read_bytes(self.loc.path("runs", n))))) for n in names]
        return sorted(out, key=lambda r: (r.started or "", r.run_id))

    def run(self, run_id: str | None = None, recipe: str | None = None) -> RunRecord:
        """The run ``run_id`` (a prefix of one run's id will do; a prefix of several is refused, naming them); by
        default the latest that succeeded (a run still in progress has not recorded its stages yet), else the
        latest. With ``recipe`` (a recipe's name), only
        that recipe's runs count: the latest of them, or the one ``run_id`` names, which must be of it."""
        runs = self.runs()
        if not runs:
            raise StoreError(f"no runs recorded in {self.root}; run `bonforge run RECIPE` first")
        if recipe is not None:
            names = sorted({r.recipe_name or "" for r in runs} - {""})
            runs = [r for r in runs if r.recipe_name == recipe]
            if not runs:
                raise StoreError(f"no run of recipe {recipe!r} in {self.root}; its runs are of "
                                 f"{', '.join(names) or 'no named recipe'}")
        if run_id is None:
            return next((r for r in reversed(runs) if r.status == "succeeded"), runs[-1])
        exact = [r for r in runs if r.run_id == run_id]
        matches = exact or [r for r in runs if run_id and r.run_id.startswith(run_id)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            ids = ("the newest: " if len(matches) > 5 else "") + ", ".join(r.run_id for r in matches[-5:])
            raise StoreError(f"run id prefix {shown(run_id)} names {len(matches)} runs ({ids}): give more of the id")
        if recipe is not None:
            raise StoreError(f"no run {shown(run_id)} of recipe {shown(recipe)} in {self.root}; `bonforge runs` lists "
                             "them")
        raise StoreError(f"no run {shown(run_id)} in {self.root}; `bonforge runs` lists them")

