"""Streamed stage inputs: a stage whose input does not fit in memory (``Stage.stream``) reads its upstream
tables in ``problem_id`` order, a batch of bounded bytes at a time, and the engine cuts what the stage
yields into shards of whole problems as it comes. A process's memory then follows the shard size, not the
size of the build.

* ``Ordered``: one committed output read in problem_id order. Files written in that order (what the
  engine's shards are) are read as they are; an output that is not in order (a source loaded in file order)
  is first sorted into a temporary file by DuckDB, which spills to disk within a memory limit.
* ``Growing``: an output still being computed (a streaming build), read shard by shard as each is written.
* ``aligned``: several inputs read side by side in chunks of whole problems: each chunk holds every row of
  every input whose problem_id is at most the last one of the driver's next batch.
* ``cut``: chunks into shards by the rule of ``plan_shards`` (a shard closes at the first problem that
  starts once it holds ``shard_rows`` rows), and by bytes as well: also once it holds ``shard_bytes`` bytes
  of strings, so that a shard of long texts fits where a shard of short ones does.
* ``shards.run_node`` cuts such a stage's shards as they come and computes them like any other stage's.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bonforge.tables.ordering import sort_by
from bonforge.errors import StoreError
from bonforge.stage import Pending, Ref
from bonforge.storage.store import StageStore

log = logging.getLogger("bonforge")

BATCH_BYTES = 8 << 20  # decoded bytes of one batch read from a file (row count from the file's metadata)
_MIN_BATCH_ROWS, _MAX_BATCH_ROWS = 256, 1 << 17
_SORT_MEMORY = "1GB"  # DuckDB's limit when it sorts an input that is not in problem_id order


def _batch_rows(meta: pq.FileMetaData, columns: list[str]) -> int:
    """Rows per batch so that a batch of ``columns`` decodes to about BATCH_BYTES."""
    names = set(columns)
    size = sum(rg.column(j).total_uncompressed_size for i in range(meta.num_row_groups) for rg in [meta.row_group(i)]
               for j in range(rg.num_columns) if rg.column(j).path_in_schema in names)
    per_row = size / max(meta.num_rows, 1)
    return int(min(_MAX_BATCH_ROWS, max(_MIN_BATCH_ROWS, BATCH_BYTES // max(per_row, 1))))


def _in_order(store: StageStore, files: list, on: str) -> bool:
    """Whether the column ``on`` never decreases through ``files`` (read one column, batch by batch)."""
    last = None
    for f in files:
        with store.loc.fs.open_input_file(store.loc.key(f)) as handle:
            for batch in pq.ParquetFile(handle).iter_batches(batch_size=_MAX_BATCH_ROWS, columns=[on]):
                col = batch.column(0)
                if not len(col):
                    continue
                if last is not None and col[0].as_py() < last:
                    return False
                if len(col) > 1 and not pc.all(pc.greater_equal(col.slice(1), col.slice(0, len(col) - 1))).as_py():
                    return False
                last = col[-1].as_py()
    return True


class _Reader:
    """Rows of one output in ``problem_id`` order, a batch at a time (``_batches``, each in order and after the
    last). ``last()`` is the problem_id that ends the next batch (None once read to the end); ``upto(hi)``
    returns every row not yet returned whose problem_id is at most ``hi`` (all the rest for None), reading
    batches as needed."""

    schema: pa.Schema
    _batches: Iterator[pa.Table]
    _buf: pa.Table | None = None
    exhausted = False
    whole = False  # each batch ends a problem: rows at most ``hi`` never follow a batch that ends at ``hi``

    def _fill(self) -> bool:
        if self._buf is None and not self.exhausted:
            self._buf = next(self._batches, None)
            self.exhausted = self._buf is None
        return self._buf is not None

    def last(self) -> str | None:
        return self._buf.column("problem_id")[-1].as_py() if self._fill() else None

    def upto(self, hi: str | None) -> list[pa.Table]:
        parts = []
        while self._fill():
            buf = self._buf
            n = buf.num_rows if hi is None else pc.sum(pc.less_equal(buf.column("problem_id"), hi)).as_py() or 0
            if n < buf.num_rows:  # in order: the rows at most ``hi`` come first
                parts.append(buf.slice(0, n))
                self._buf = buf.slice(n)
                break
            parts.append(buf)
            self._buf = None
            if self.whole and hi is not None and buf.column("problem_id")[-1].as_py() == hi:
                break  # not read on (a growing output's next shard may not be written yet)
        return parts


class Ordered(_Reader):
    """One committed output, read in ``problem_id`` order a bounded batch at a time."""

    def __init__(self, store: StageStore, ref: Ref, columns: list[str], scratch: Path):
        files = store.paths(ref.stage, ref.key)
        self.columns = columns
        if not _in_order(store, files, "problem_id"):
            log.debug("%s %s is not in problem_id order: sorting it on disk first", ref.stage, ref.key)
            files = [_sorted_copy(store, files, columns, scratch / f"{ref.stage}-{ref.key}.parquet")]
            store = StageStore(scratch)
        with store.loc.fs.open_input_file(store.loc.key(files[0])) as handle:
            self.schema = pq.read_schema(handle).remove_metadata()
        self.schema = pa.schema([self.schema.field(c) for c in columns])
        self._batches = _ahead(self._read(store, files))

    def _read(self, store: StageStore, files: list) -> Iterator[pa.Table]:
        for f in files:
            with store.loc.fs.open_input_file(store.loc.key(f)) as handle:
                # buffer_size: read column chunks page by page, never a whole row group of texts at once
                reader = pq.ParquetFile(handle, buffer_size=1 << 20)
                for batch in reader.iter_batches(batch_size=_batch_rows(reader.metadata, self.columns),
                                                 columns=self.columns):
                    if batch.num_rows:
                        yield pa.Table.from_batches([batch]).replace_schema_metadata()


class Growing(_Reader):
    """One output still being computed (a streaming build's ``Pending`` ref), read shard by shard as each is
    written, in shard order: a shard is whole problems, and the shards of a stage follow one another in
    problem_id order (``plan_shards``, ``cut``); each is sorted by problem_id when read. Waits for the first
    shard (its schema)."""

    whole = True  # a shard is whole problems

    def __init__(self, store: StageStore, ref: Pending, columns: list[str]):
        self.store, self.ref, self.columns = store, ref, columns
        self._batches = self._read()
        self._buf = next(self._batches, None)
        self.exhausted = self._buf is None
        path = store.shard_path(ref.stage, ref.key, 0)
        self.schema = pa.schema([store.read_schema(path).field(c) for c in columns]) if self._buf is None \
            else self._buf.schema

    def _read(self) -> Iterator[pa.Table]:
        i, last = 0, None
        while self.ref.output.shard(i):
            path = self.store.shard_path(self.ref.stage, self.ref.key, i)
            table = sort_by(self.store.read_file(path, self.columns).replace_schema_metadata(), ["problem_id"])
            i += 1
            if not table.num_rows:
                continue
            first = table.column("problem_id")[0].as_py()
            if last is not None and first < last:
                raise StoreError(f"{self.ref.stage} {self.ref.key}: shard {i - 1} starts at problem {first!r}, "
                                 f"before the last one of shard {i - 2} ({last!r}): it cannot be read as it comes")
            last = table.column("problem_id")[-1].as_py()
            yield table


def _ahead(batches: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """``batches``, each next one read on a thread while this one is used (Parquet decoding releases the
    GIL, so reading takes the other core); one batch ahead, so a reader holds two batches of BATCH_BYTES
    (8 MB: the 16 MB of one batch read in turn; a stage reads several inputs, one reader each)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        coming = pool.submit(next, batches, None)
        while (batch := coming.result()) is not None:
            coming = pool.submit(next, batches, None)
            yield batch


def _sorted_copy(store: StageStore, files: list, columns: list[str], path: Path) -> str:
    """``columns`` of ``files`` sorted by problem_id into the Parquet file ``path``, by DuckDB within
    _SORT_MEMORY (it spills beside ``path``)."""
    con = store.duckdb()
    con.execute(f"SET memory_limit = '{_SORT_MEMORY}'")
    con.execute("SET temp_directory = ?", [str(path.parent / "duckdb-tmp")])
    con.execute("SET preserve_insertion_order = false")
    cols = ", ".join(f'"{c}"' for c in columns)
    order = ", ".join(f'"{c}"' for c in ("problem_id", "candidate_id") if c in columns)
    rel = con.read_parquet([str(f) for f in files], union_by_name=True)
    con.register("unsorted", rel)
    con.execute(f"COPY (SELECT {cols} FROM unsorted ORDER BY {order}) TO '{path}' "
                "(FORMAT parquet, ROW_GROUP_SIZE 65536, COMPRESSION zstd)")
    con.close()
    return str(path)


def aligned(inputs: dict[str, list[Ordered]]) -> Iterator[dict[str, pa.Table]]:
    """Chunks of whole problems of several inputs, in problem_id order: name -> the rows of that name's
    outputs. The first output of the first name drives: a chunk ends at the last problem_id of its next
    batch (the last chunk takes what is left of every input)."""
    driver = next(iter(inputs.values()))[0]
    while True:
        hi = driver.last()
        chunk = {}
        for name, readers in inputs.items():
            parts = [p for r in readers for p in r.upto(hi)] or [readers[0].schema.empty_table()]
            chunk[name] = pa.concat_tables(parts, promote_options="default")
        yield chunk
        if hi is None:
            return


@contextlib.contextmanager
def opened(store: StageStore, refs: dict[str, list[Ref]], columns: dict[str, list[str]]):
    """A reader of ``columns`` (name -> columns) of each named input: ``Ordered`` for a committed output,
    ``Growing`` for one still being computed; a scratch folder for the sorted copies lives as long as the block."""
    with tempfile.TemporaryDirectory(prefix="bonforge-sorted-") as scratch:
        yield {name: [Growing(store, r, cols) if isinstance(r, Pending) and r.output.ref is None
                      else Ordered(store, r.output.ref if isinstance(r, Pending) else r, cols, Path(scratch))
                      for r in refs[name]] for name, cols in columns.items()}


def _stringy(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)


def _row_bytes(t: pa.Table) -> np.ndarray:
    """The bytes of each row's string and binary values, those in lists of them included."""
    out = np.zeros(t.num_rows, dtype=np.int64)
    for col in t.columns:
        if _stringy(col.type):
            out += pc.fill_null(pc.binary_length(col), 0).to_numpy().astype(np.int64)
        elif pa.types.is_list(col.type) and _stringy(col.type.value_type):
            arr = col.combine_chunks()
            sizes = pc.fill_null(pc.binary_length(pc.list_flatten(arr)), 0).to_numpy(zero_copy_only=False)
            out += np.bincount(pc.list_parent_indices(arr).to_numpy(zero_copy_only=False), weights=sizes,
                               minlength=len(arr)).astype(np.int64)
    return out


def cut(chunks: Iterable[pa.Table], shard_rows: int | None, shard_bytes: int | None) -> Iterator[pa.Table]:
    """Shards of whole problems from ``chunks`` (tables of whole problems, each after the last in problem
    order): a shard closes at the first problem that starts once it holds ``shard_rows`` rows or
    ``shard_bytes`` bytes of strings. Without either limit, one shard. An empty input is one empty shard.
    A chunk ends a problem, so a shard full at a chunk's end closes there, before the next chunk is asked for
    (a streaming build's next upstream shard: its verification need not wait for the next sampling shard)."""
    carry: pa.Table | None = None
    yielded = False
    for chunk in chunks:
        if not chunk.num_rows and carry is not None:
            continue
        chunk = sort_by(chunk, ["problem_id"] + (["candidate_id"] if "candidate_id" in chunk.column_names else []))
        t = chunk if carry is None else pa.concat_tables([carry, chunk])
        carry = t
        if not shard_rows and not shard_bytes:
            continue
        pid = t.column("problem_id")
        starts = np.flatnonzero(pc.not_equal(pid.slice(1), pid.slice(0, len(pid) - 1)).to_numpy(
            zero_copy_only=False)) + 1 if len(pid) > 1 else np.zeros(0, dtype=np.int64)
        size = np.r_[0, np.cumsum(_row_bytes(t))] if shard_bytes else None
        begin = 0
        for s in [*starts.tolist(), t.num_rows]:  # the chunk's end starts the next problem (if any comes)
            if (shard_rows and s - begin >= shard_rows) or (shard_bytes and size[s] - size[begin] >= shard_bytes):
                yield t.slice(begin, s - begin)
                yielded = True
                begin = s
        carry = t.slice(begin)
    if carry is not None and (carry.num_rows or not yielded):
        yield carry
