"""Row-level reuse: a stage that declares ``rows`` (``bonforge.stage.Rows``) computes only the rows whose
content identity (``bonforge.identity``) no committed output of that stage holds yet, in any run or recipe
of this store, and takes the others from there. What is committed is an ordinary stage output under the
stage's own key, in the order a from-scratch computation writes it: readers see no difference.

The look-up is an index written with each commit: ``stages/<stage>/<key>/rows.parquet`` (``row_id``, the
identity; ``row_key``, the row's key in that output), named by the manifest, so an entry is usable only
once its output is committed (the manifest is written last). The identities are matched by a DuckDB hash
join (``match``), each taken from the newest output that holds it. An index or data file that is gone or
unreadable only means its rows are computed again.

Each shard's written file records in its Parquet metadata how many of its rows were reused
(``bonforge.rows_reused``), and in the file's own metadata (not the tables read) its piece of the row index
(``bonforge.row_index``: the ids and row keys of its rows, less the volatile ones): written with the shard (no
file of its own: no more requests to an object store), joined into the index at commit from the shards'
footers, which the manifest's ``rows_reused`` / ``rows_computed`` count from too, also over the shards an
interrupted run wrote.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bonforge.engine import rejudge
from bonforge.runtime import scratch_db
from bonforge.manifest import Manifest
from bonforge.stage import Node, Rows
from bonforge.storage.store import StageStore

log = logging.getLogger("bonforge")

INDEX = "rows.parquet"
REUSED = b"bonforge.rows_reused"
PIECE = b"bonforge.row_index"
UNREADABLE = (OSError, pa.ArrowException, ValueError, KeyError)
INDEX_SCHEMA = pa.schema({"row_id": pa.binary(), "row_key": pa.string()})


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
    ids = rows.ids(table, context, node.params).combine_chunks()  # one chunk: slices cost nothing
    starts = _runs(table.column("problem_id"))  # each problem in one shard only
    problems = table.column("problem_id").take(starts)
    shard_of = np.repeat(np.arange(len(shards)), [s.num_rows for s in shards])[starts]
    runs = _runs(ids.column("problem_id"))
    pos = pc.index_in(ids.column("problem_id").take(runs), value_set=problems).to_numpy(zero_copy_only=False)
    per_row = np.repeat(shard_of[pos], np.diff(np.append(runs, ids.num_rows))) if ids.num_rows else np.zeros(0, int)
    bounds = np.concatenate([[0], np.cumsum(np.bincount(per_row, minlength=len(shards)))])
    parts = [Part(ids.slice(bounds[i], bounds[i + 1] - bounds[i])) for i in range(len(shards))]
    partials = store.partials(node.stage.name, node.key)  # this node's own, kept by an earlier try
    if not (look_up or partials) or not todo:
        return parts
    computing = np.zeros(len(shards), bool)
    computing[todo] = True
    wanted = computing[per_row]  # the rows of the shards to compute
    hit = np.zeros(ids.num_rows, bool)
    found, content = find(store, node.stage.name, rows, ids.column("row_id").filter(pa.array(wanted)), partials,
                          look_up)
    hit[wanted] = found
    everything = bool(hit.all())  # a rebuild over the same rows: no copy of the ids
    fresh = ids if everything else ids.filter(pa.array(hit))
    cols = {**{c: fresh.column(c) for c in fresh.column_names}, **{c: content.column(c) for c in rows.content}}
    reused = pa.table({f.name: cols[f.name].cast(f.type) for f in rows.schema}, schema=rows.schema)
    missing = ids.slice(0, 0) if everything else ids.filter(pa.array(~hit))
    hits = np.concatenate([[0], np.cumsum(np.bincount(per_row[hit], minlength=len(shards)))])
    misses = np.concatenate([[0], np.cumsum(np.bincount(per_row[~hit], minlength=len(shards)))])
    for i in todo:
        parts[i].reused = reused.slice(hits[i], hits[i + 1] - hits[i])
        parts[i].todo = missing.slice(misses[i], misses[i + 1] - misses[i])
    return parts


def _runs(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """The start of each run of equal values."""
    if len(values) < 2:
        return np.zeros(len(values), np.int64)
    change = pc.not_equal(values.slice(1), values.slice(0, len(values) - 1))
    return np.concatenate([[0], np.flatnonzero(change.to_numpy(zero_copy_only=False)) + 1])


def find(store: StageStore, stage: str, rows: Rows, wanted: pa.Array, partials: list = (),
         committed: bool = True) -> tuple[np.ndarray, pa.Table]:
    """Which wanted identities the node's own ``partials`` (``StageStore.partials``: the rows a shard that fell
    short kept) or (``committed``) some committed output of ``stage`` hold (newest output first), and the
    content columns of those, in the order of ``wanted``."""
    return fetch(store, stage, rows, locate(store, stage, wanted, partials, committed), len(wanted))


def locate(store: StageStore, stage: str, wanted: pa.Array, partials: list = (),
           committed: bool = True) -> list[tuple[list, list[str], pa.Array, np.ndarray]]:
    """The ``partials`` files, then (``committed``) the committed outputs of ``stage`` newest first, that hold
    some of the ``wanted`` identities, each with its files, its column names, the row keys of the wanted
    identities it holds and their positions in ``wanted`` (each identity from the first that has it)."""
    sources = []
    todo = np.arange(len(wanted))
    outputs = _committed(store, stage) if committed else []
    for key, man in [(None, None)] * bool(partials) + outputs:
        if not len(todo):
            break
        try:
            if key is None:
                index, files = _pieces(store, partials)
                if not files:
                    continue
            else:
                index = store.read_file(store.loc.path("stages", stage, key, man.row_index))
                files = [(store.paths(stage, key), [f.split(":")[0] for f in man.get("schema") or []])]
            at = match(wanted.take(todo) if len(todo) < len(wanted) else wanted, index.column("row_id"))
            hit = at >= 0
            row_keys = index.column("row_key").take(at[hit])
            of = index.column("file").to_numpy()[at[hit]] if key is None else np.zeros(len(row_keys), int)
        except (*UNREADABLE, duckdb.Error) as e:
            log.warning("%s %s: its row index is unreadable (%s): those rows are computed again", stage,
                        key or "(partial shards)", e)
            continue
        for i, (paths, columns) in enumerate(files):  # a row only from the file(s) whose index names its identity
            mine = of == i
            if mine.any():
                sources.append((paths, columns, row_keys.filter(pa.array(mine)), todo[hit][mine]))
        todo = todo[~hit]
    return sources


def _pieces(store: StageStore, files: list) -> tuple[pa.Table | None, list[tuple[list, list[str]]]]:
    """The row index of ``files`` from the pieces in their footers (``file``: the position of its file among those
    kept), and the files it covers, each with its columns: one whose footer cannot be read (a zero-byte or cut
    file) is left out, its rows computed again, not every file's. Partial files may hold one row key under other
    identities (journals of teachers of other settings: ``bonforge.flows.early``), so each row is read from its
    own file only."""
    pieces, kept = [], []
    for f in files:
        try:
            footer = _footer(store, f)
            piece = _piece(footer.metadata or {}).select(["row_id", "row_key"]).cast(INDEX_SCHEMA)
            kept.append(([f], footer.schema.to_arrow_schema().names))
            pieces.append(piece.append_column("file", pa.array(np.full(piece.num_rows, len(kept) - 1))))
        except UNREADABLE as e:
            log.warning("%s is unreadable (%s): its rows are computed again", f, e)
    return (pa.concat_tables(pieces, promote_options="permissive") if pieces else None), kept


def _footer(store: StageStore, path) -> pq.FileMetaData:
    return pq.read_metadata(store.loc.key(path), filesystem=store.loc.fs)


def footer_piece(store: StageStore, path) -> pa.Table:
    """The piece of the row index in the footer of the shard file ``path`` (raises ``UNREADABLE``)."""
    return _piece(_footer(store, path).metadata or {})


def _piece(meta: dict) -> pa.Table:
    return pa.ipc.open_stream(base64.b64decode(meta[PIECE], validate=True)).read_all()


def match(wanted: pa.Array | pa.ChunkedArray, values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """For each of ``wanted`` the position of an equal value in ``values`` (-1: none; nulls match nothing): a
    hash join by DuckDB, on every core (1.8x Arrow's ``index_in`` for 1.6 M identities on 2 cores)."""
    out = np.full(len(wanted), -1)
    if not len(wanted) or not len(values):
        return out
    with scratch_db.cursor() as con:
        con.register("w", pa.table({"v": wanted, "i": np.arange(len(wanted))}))
        con.register("x", pa.table({"v": values, "j": np.arange(len(values))}))
        pairs = con.sql("SELECT i, j FROM w JOIN x USING (v)").to_arrow_table()
    out[pairs.column("i").to_numpy()] = pairs.column("j").to_numpy()
    return out


def fetch(store: StageStore, stage: str, rows: Rows, sources: list[tuple[list, list[str], pa.Array, np.ndarray]],
          n_wanted: int) -> tuple[np.ndarray, pa.Table]:
    """Which of the ``n_wanted`` identities were found (not found: also in files that cannot be read), and the
    content of those, in wanted order. Each source is read a file at a time: its key columns, then the content
    of the files holding some of the rows, each row taken once (memory: one file and the rows found). An
    ``optional`` content column a source lacks (written before the column existed) comes back null."""
    found = np.zeros(n_wanted, bool)
    blocks: list[tuple[np.ndarray, pa.Table]] = []  # (positions in wanted, ascending; their content)
    for files, columns, row_keys, positions in sources:
        read = [c for c in rows.content if c in columns or c not in rows.optional]
        unread = []
        for path in files:
            try:
                pos = match(row_keys, rows.row_keys(store.read_file(path, list(rows.keys))))
                hit = np.flatnonzero(pos >= 0)
                if not len(hit):
                    continue
                hit = hit[np.argsort(positions[hit], kind="stable")]
                data = store.read_file(path, read).take(pa.array(pos[hit]))
            except (*UNREADABLE, duckdb.Error) as e:  # its rows are looked for in the next files, else computed
                unread.append((path, e))
                continue
            blocks.append((positions[hit], pa.table(
                {c: data.column(c).cast(rows.schema.field(c).type) if c in data.column_names
                 else pa.nulls(data.num_rows, rows.schema.field(c).type) for c in rows.content})))
            found[positions[hit]] = True
            row_keys, positions = row_keys.filter(pa.array(pos < 0)), positions[pos < 0]
        if unread:
            log.warning("%s: %d of %d files unreadable (%s: %s): their rows are computed again", stage, len(unread),
                        len(files), *unread[0])
    if not blocks:
        return found, pa.table({c: pa.array([], rows.schema.field(c).type) for c in rows.content})
    at = np.concatenate([b[0] for b in blocks])
    content = pa.concat_tables([b[1] for b in blocks]) if len(blocks) > 1 else blocks[0][1]
    if len(at) > 1 and (np.diff(at) < 0).any():  # files in another order than the rows wanted
        content = content.take(pa.array(np.argsort(at, kind="stable")))
    return found, content


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
    """The shard as written: computed and reused rows in the order of ``part.ids``, its reused count in the
    file's metadata."""
    tables = [t.select(rows.schema.names).cast(rows.schema) for t in (computed, part.reused) if t is not None]
    out = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    order = pc.index_in(rows.row_keys(out), value_set=rows.row_keys(part.ids))
    out = out.take(pc.sort_indices(order))
    reused = part.reused.num_rows if part.reused is not None else 0
    return out.replace_schema_metadata({**(out.schema.metadata or {}), REUSED: str(reused).encode()})


def notes(part: Part, written: pa.Table, rows: Rows) -> dict[bytes, bytes]:
    """The shard file's own metadata: its piece of the row index (in the shard itself: a written shard always
    has its piece), an Arrow stream (zstd) in base64 (Parquet metadata is text to some readers)."""
    computed = part.ids if part.todo is None else part.todo
    return {PIECE: rejudge.encode(piece(part, written, rows)), **rejudge.note(computed, written, rows)}


def piece(part: Part, written: pa.Table, rows: Rows) -> pa.Table:
    """The row index of the rows of ``written`` (their ids in ``part``), less the ``volatile`` ones."""
    kept = rows.row_keys(written)
    for column, values in rows.volatile.items():  # rows that are no verdict on the content: never reused
        kept = kept.filter(pc.invert(pc.is_in(written.column(column), value_set=pa.array(values))))
    index = pa.table({"row_id": part.ids.column("row_id"), "row_key": rows.row_keys(part.ids),
                      **{c: part.ids.column(c) for c in ("base_id",) if c in part.ids.column_names}})  # rejudge
    return index.filter(pc.is_in(index.column("row_key"), value_set=kept))


def computed_rows(store: StageStore, node: Node, shards: list[int]) -> int:
    """The rows of the written ``shards`` of ``node`` that were computed (not reused), from their footers."""
    rows = 0
    for i in shards:
        path = store.loc.key(store.shard_path(node.stage.name, node.key, i))
        footer = pq.read_metadata(path, filesystem=store.loc.fs)
        rows += footer.num_rows - int((footer.metadata or {}).get(REUSED, b"0"))
    return rows


def commit_rows(store: StageStore, node: Node, n_shards: int) -> dict:
    """Write the row index of ``node``'s output beside its shards, from the pieces in their footers (a shard
    written without one, by an older version: its rows are not offered for reuse), one footer in memory at a
    time plus the index itself (two columns); returns the manifest's ``row_index`` (its file name),
    ``rows_reused`` and ``rows_computed``."""
    tables = [INDEX_SCHEMA.empty_table()]
    bases = []  # the rows each shard computed, whose stored verdicts under another judge count as re-judged
    rows = reused = 0
    for i in range(n_shards):
        path = store.shard_path(node.stage.name, node.key, i)
        footer = pq.read_metadata(store.loc.key(path), filesystem=store.loc.fs)
        meta = footer.metadata or {}
        rows, reused = rows + footer.num_rows, reused + int(meta.get(REUSED, b"0"))
        bases.append(rejudge.read(meta))
        try:
            tables.append(_piece(meta))
        except UNREADABLE as e:
            log.warning("%s %s: shard %d has no readable piece of the row index (%s): its rows are not offered "
                        "for reuse", node.stage.name, node.key, i, e)
    index = pa.concat_tables(tables, promote_options="permissive")
    store.loc.write_parquet(index, store.loc.path("stages", node.stage.name, node.key, INDEX))
    return {"row_index": INDEX, "rows_reused": reused, "rows_computed": rows - reused,
            **rejudge.count(store, node, [b for b in bases if b is not None], _committed)}
