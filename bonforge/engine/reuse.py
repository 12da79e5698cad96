"""Row-level reuse: a stage that declares ``rows`` (``bonforge.stage.Rows``) computes only the rows whose
content identity (``bonforge.identity``) no committed output of that stage holds yet, in any run or recipe
of this store, and takes the others from there. What is committed is an ordinary stage output under the
stage's own key, in the order a from-scratch computation writes it: readers see no difference.

The look-up is an index written with each commit: ``stages/<stage>/<key>/rows.parquet`` (``row_id``, the
identity; ``row_key``, the row's key in that output), named by the manifest, so an entry is usable only
once its output is committed (the manifest is written last). An index or data file that is gone or
unreadable only means its rows are computed again.

Each shard's written file records in its Parquet metadata how many of its rows were reused
(``bonforge.rows_reused``): the manifest's ``rows_reused`` / ``rows_computed`` count them, also over the
shards an interrupted run wrote.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bonforge import identity
from bonforge.manifest import Manifest
from bonforge.stage import Node, Rows
from bonforge.storage.store import StageStore

log = logging.getLogger("bonforge")

INDEX = "rows.parquet"
REUSED = b"bonforge.rows_reused"
_UNREADABLE = (OSError, pa.ArrowException, ValueError, KeyError)


@dataclass
class Part:
    """One shard's output rows: ``ids`` (all of them, in output order), ``reused`` (the rows taken from the
    store, complete) and ``todo`` (the ids rows still to compute; None: all of them, nothing reused)."""

    ids: pa.Table
    reused: pa.Table | None = None
    todo: pa.Table | None = None

    @property
    def idle(self) -> bool:
        """Every row is reused: nothing to compute."""
        return self.todo is not None and self.todo.num_rows == 0


def plan(store: StageStore, node: Node, shards: list[pa.Table], context: dict, todo: list[int],
         look_up: bool) -> list[Part]:
    """The output rows of every shard, and for the shards ``todo`` the rows found in the store (none
    unless ``look_up``). The identities are computed over all shards at once, then split: the rows of a
    shard are a contiguous block (shards are runs of whole problems, in the order of their rows)."""
    rows = node.stage.rows
    assert rows is not None
    table = shards[0] if len(shards) == 1 else pa.concat_tables(shards)
    ids = rows.ids(table, context, node.params)
    problems = [pc.unique(s.column("problem_id")) for s in shards]  # each problem in one shard only
    shard_of = np.repeat(np.arange(len(shards)), [len(p) for p in problems])
    pos = pc.index_in(ids.column("problem_id"), value_set=pa.concat_arrays(problems) if problems else pa.array([]))
    per_row = shard_of[pos.to_numpy(zero_copy_only=False)] if ids.num_rows else np.array([], dtype=int)
    bounds = np.concatenate([[0], np.cumsum(np.bincount(per_row, minlength=len(shards)))])
    parts = [Part(ids.slice(bounds[i], bounds[i + 1] - bounds[i])) for i in range(len(shards))]
    if not look_up or not todo:
        return parts
    wanted = pc.unique(pa.concat_arrays([parts[i].ids.column("row_id").combine_chunks() for i in todo]))
    found = find(store, node.stage.name, rows, wanted)
    pos = pc.index_in(ids.column("row_id"), value_set=found.column("row_id"))  # once, over every shard
    hit = pc.is_valid(pos).to_numpy(zero_copy_only=False)
    fresh = ids.filter(pa.array(hit))
    content = found.take(pos.filter(pa.array(hit)))
    cols = {**{c: fresh.column(c) for c in fresh.column_names}, **{c: content.column(c) for c in rows.content}}
    reused = pa.table({f.name: cols[f.name].cast(f.type) for f in rows.schema}, schema=rows.schema)
    missing = ids.filter(pa.array(~hit))
    hits = np.concatenate([[0], np.cumsum(np.bincount(per_row[hit], minlength=len(shards)))])
    misses = np.concatenate([[0], np.cumsum(np.bincount(per_row[~hit], minlength=len(shards)))])
    for i in todo:
        parts[i].reused = reused.slice(hits[i], hits[i + 1] - hits[i])
        parts[i].todo = missing.slice(misses[i], misses[i + 1] - misses[i])
    return parts


def find(store: StageStore, stage: str, rows: Rows, wanted: pa.Array) -> pa.Table:
    """``row_id`` + the content columns of every wanted identity some committed output of ``stage`` holds
    (newest output first)."""
    return fetch(store, stage, rows, locate(store, stage, wanted))


def locate(store: StageStore, stage: str, wanted: pa.Array) -> list[tuple[str, pa.Table]]:
    """The committed outputs of ``stage`` holding some of the ``wanted`` identities, newest first, each with
    the entries of its row index that match (``row_id``, ``row_key``)."""
    sources = []
    for key, man in _committed(store, stage):
        try:
            index = store.read_file(store.loc.path("stages", stage, key, man.row_index))
            index = index.filter(pc.is_in(index.column("row_id"), value_set=wanted))
        except _UNREADABLE as e:
            log.warning("%s %s: its row index is unreadable (%s): those rows are computed again", stage, key, e)
            continue
        if index.num_rows:
            sources.append((key, index))
    return sources


def fetch(store: StageStore, stage: str, rows: Rows, sources: list[tuple[str, pa.Table]]) -> pa.Table:
    """The content of the located rows, each identity from the first source that has it and can be read."""
    empty = pa.table({"row_id": pa.array([], identity.TYPE),
                      **{c: pa.array([], rows.schema.field(c).type) for c in rows.content}})
    found: list[pa.Table] = []
    seen = pa.array([], identity.TYPE)
    for key, index in sources:
        if found:
            index = index.filter(pc.invert(pc.is_in(index.column("row_id"), value_set=seen)))
        if not index.num_rows:
            continue
        try:
            data = store.read(stage, key, [rows.key, *rows.content])
            pos = pc.index_in(index.column("row_key"), value_set=data.column(rows.key))
        except _UNREADABLE as e:
            log.warning("%s %s: its files are unreadable (%s): those rows are computed again", stage, key, e)
            continue
        hit = pc.is_valid(pos)
        index, got = index.filter(hit), data.take(pos.filter(hit))
        found.append(pa.table({"row_id": index.column("row_id").cast(identity.TYPE),
                               **{c: got.column(c) for c in rows.content}}))
        seen = pa.concat_arrays([seen, index.column("row_id").combine_chunks().cast(identity.TYPE)])
    return pa.concat_tables([empty, *found], promote_options="permissive") if found else empty


def _committed(store: StageStore, stage: str) -> list[tuple[str, Manifest]]:
    """The committed outputs of ``stage`` that carry a row index, newest first."""
    out = []
    for key in store.loc.names(store.loc.path("stages", stage)):
        try:
            man = store.manifest(stage, key) if store.exists(stage, key) else None
        except Exception as e:  # a manifest being replaced, or unreadable: not a source
            log.warning("%s %s: manifest unreadable (%s)", stage, key, e)
            continue
        if man and man.row_index:
            out.append((key, man))
    return sorted(out, key=lambda km: (km[1].created, km[0]), reverse=True)


def merge(part: Part, computed: pa.Table | None, rows: Rows) -> pa.Table:
    """The shard as written: computed and reused rows in the order of ``part.ids``, its reused count in
    the file's metadata."""
    tables = [t.select(rows.schema.names).cast(rows.schema) for t in (computed, part.reused) if t is not None]
    out = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    order = pc.index_in(out.column(rows.key), value_set=part.ids.column(rows.key))
    out = out.take(pc.sort_indices(order))
    reused = part.reused.num_rows if part.reused is not None else 0
    return out.replace_schema_metadata({**(out.schema.metadata or {}), REUSED: str(reused).encode()})


def reused_count(metadata: list[dict[bytes, bytes]]) -> int:
    return sum(int(m.get(REUSED, b"0")) for m in metadata)


def write_index(store: StageStore, node: Node, parts: list[Part], written: pa.Table) -> str:
    """Write the row index of ``node``'s output (the ids of the rows it holds: ``written``, its key column
    and the ``volatile`` ones) beside its shards; returns its file name, for the manifest."""
    rows = node.stage.rows
    assert rows is not None
    ids = pa.concat_tables([p.ids.select([rows.key, "row_id"]) for p in parts])
    kept = written.column(rows.key)
    for column, values in rows.volatile.items():  # rows that are no verdict on the content: never reused
        kept = kept.filter(pc.invert(pc.is_in(written.column(column), value_set=pa.array(values))))
    ids = ids.filter(pc.is_in(ids.column(rows.key), value_set=kept))
    index = pa.table({"row_id": ids.column("row_id"), "row_key": ids.column(rows.key)})
    store.loc.write_parquet(index, store.loc.path("stages", node.stage.name, node.key, INDEX))
    return INDEX
