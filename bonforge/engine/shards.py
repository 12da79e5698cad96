"""Run one node: skip it when committed, else compute its missing shards (in process or on Ray), write
each shard atomically as it finishes, then commit the manifest from the node's own identity.

Shards are groups of whole problems (rows sharing a ``problem_id`` never straddle two shards) taken in
``problem_id`` order, so the shard plan is a pure function of the input and a rerun after a crash
recomputes only the shards that are missing. Ray is joined or started in ``bonforge.runtime.cluster``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections import Counter
from functools import partial
from typing import Any, Callable, Iterable, Iterator

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from bonforge.runtime.cluster import ensure_ray, ray_up
import bonforge.engine.reuse as reuse
import bonforge.engine.streams as streams
from bonforge.engine.streaming import Ahead, Output, pending, resolved
from bonforge.engine.reuse import Part
import bonforge.engine.shard_progress as shard_progress
from bonforge.engine.shard_progress import RayCounts, ShardCounts
from bonforge.manifest import Manifest
from bonforge.stage import Node, Params, Pending, Ref, Rows
from bonforge.storage.catalog import add_view
from bonforge.storage.run_record import busy
from bonforge.storage.store import StageStore

log = logging.getLogger("bonforge")


def plan_shards(table: pa.Table, shard_rows: int | None) -> list[pa.Table]:
    """Split ``table`` into shards of about ``shard_rows`` rows without splitting a problem."""
    if not shard_rows or table.num_rows <= shard_rows:
        return [table]
    table = table.sort_by(
        [("problem_id", "ascending")]
        + ([("candidate_id", "ascending")] if "candidate_id" in table.column_names else [])
    )
    pids = table.column("problem_id")
    # boundaries where problem_id changes
    changes = pc.not_equal(pids.slice(1), pids.slice(0, len(pids) - 1))
    starts = [0] + [i + 1 for i in pc.indices_nonzero(changes).to_pylist()]
    shards, begin = [], 0
    for s in starts[1:]:
        if s - begin >= shard_rows:
            shards.append(table.slice(begin, s - begin))
            begin = s
    shards.append(table.slice(begin))
    return shards


class StoreInputs:
    """A node's inputs over the store: one DuckDB view per input name, opened on first use. An input still
    being computed (``Pending``, a streaming build) is read as it is written by ``aligned``; anything else
    waits for its commit."""

    def __init__(self, store: StageStore, refs: dict[str, list[Ref]], params: Params | None = None):
        self.store, self.refs, self.params = store, refs, params
        self._con: duckdb.DuckDBPyConnection | None = None

    def __contains__(self, name: str) -> bool:
        return name in self.refs

    def _committed(self, name: str) -> list[Ref]:
        return [r.output.wait() if isinstance(r, Pending) else r for r in self.refs[name]]

    def files(self, name: str) -> list[str]:
        return [str(p) for r in self._committed(name) for p in self.store.paths(r.stage, r.key)]

    def columns(self, name: str) -> list[str]:
        out: dict[str, None] = {}
        for r in self.refs[name]:
            if isinstance(r, Pending) and r.output.ref is None:
                path = self.store.shard_path(r.stage, r.key, 0) if r.output.shard(0) else None
            else:
                path = next(iter(self.store.paths(r.stage, r.key)), None)
            out.update(dict.fromkeys(self.store.read_schema(path).names if path else ()))
        return list(out)

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = self.store.duckdb()
            for name in self.refs:
                add_view(self._con, self.store, name, [(r.stage, r.key) for r in self._committed(name)])
        return self._con

    def read(self, name: str, columns: list[str] | None = None) -> pa.Table:
        tables = [self.store.read(r.stage, r.key, columns) for r in self._committed(name)]
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="default")

    def sql(self, query: str, params: Any = None) -> pa.Table:
        return self.con.sql(query, params=params).to_arrow_table()

    def tables(self, name: str) -> Iterator[pa.Table]:
        return (self.store.read_file(p) for p in self.files(name))

    @contextlib.contextmanager
    def aligned(self, columns: dict[str, list[str]]) -> Iterator[Iterator[dict[str, pa.Table]]]:
        with streams.opened(self.store, self.refs, columns) as readers:
            yield streams.aligned(readers)


class Shards:
    """The written shards of a node being committed (``bonforge.stage.Written``)."""

    def __init__(self, store: StageStore, node: Node, n_shards: int, compute: Callable[..., pa.Table]):
        self.store, self.node, self.n_shards, self.compute = store, node, n_shards, compute

    def read(self, columns: list[str] | None = None) -> pa.Table:
        return self.store.read_shards(self.node.stage.name, self.node.key, self.n_shards, columns)

    def each(self, columns: list[str]) -> Iterator[pa.Table]:
        return (self.store.read_file(self.store.shard_path(self.node.stage.name, self.node.key, i), columns)
                for i in range(self.n_shards))

    def shard_metadata(self) -> list[dict[bytes, bytes]]:
        paths = (self.store.shard_path(self.node.stage.name, self.node.key, i) for i in range(self.n_shards))
        return [self.store.read_schema(p).metadata or {} for p in paths]


# Consecutive shards whose rows are looked up in the store at once (one read of each row index): a window
# closes at this many rows or bytes; the driver holds one window and the shards in flight.
WINDOW_ROWS, WINDOW_BYTES = 200_000, 64 << 20
IN_FLIGHT_PER_CPU = 2  # Ray: shards submitted and not yet written, per CPU of the cluster (back-pressure)


def _compute_and_write(
    root: str, stage: str, key: str, shard: int, table: pa.Table, compute: Callable[..., pa.Table] | None,
    part: Part | None = None, rows: Rows | None = None, progress: Callable[[int, int], None] | None = None,
    **context
) -> tuple[float, float, str, str | None]:
    """Compute and write one shard (for a stage with row reuse: the rows of ``part`` still to compute, merged
    with its reused ones, its piece of the row index in the file's own metadata); returns (when it began, when
    it ended: epoch seconds; hostname, Ray node id or None). ``progress``: given to a compute that reports its
    work (``Stage.reports``)."""
    import socket

    t0 = time.time()
    store = StageStore(root)
    if progress is not None:
        context = {**context, "progress": progress}
    if part is None:
        store.write_shard(stage, key, shard, compute(table, **context))
    else:
        out = reuse.merge(part, None if part.idle else compute(table, **context, **_todo(part)), rows)
        store.write_shard(stage, key, shard, out, reuse.notes(part, out, rows))
    return t0, time.time(), socket.gethostname(), _ray_node()


def _todo(part: Part) -> dict:
    return {} if part.todo is None else {"todo": part.todo}


def _ray_node() -> str | None:
    """The id of the Ray node running this process, when it is a Ray worker (hostnames repeat when several
    nodes share a machine)."""
    if not ray_up():
        return None
    import ray

    return ray.get_runtime_context().get_node_id()


def _opened(node: Node) -> contextlib.AbstractContextManager[Callable[..., pa.Table]]:
    stage = node.stage
    if stage.open is not None:
        return stage.open(node.params)
    return contextlib.nullcontext(partial(stage.compute, **node.params.compute_args()) if node.params
                                 else stage.compute)


class _Plan:
    """The shards of a node as they come, cut into windows (``WINDOW_ROWS``, ``WINDOW_BYTES``) whose rows
    are looked up in the store at once. Yields (shard, table, part) for each shard still to compute; shards
    written by an earlier run are skipped, and shards whose every row is reused are written here (their rows
    go to ``advance``, the stage's progress). ``count``: the shards seen."""

    def __init__(self, store: StageStore, node: Node, shards: Iterable[pa.Table], done: set[int], context: dict,
                 look_up: bool, output: Any = None):
        self.store, self.node, self.shards, self.done, self.output = store, node, shards, done, output
        self.context, self.look_up, self.count = context, look_up, 0
        self.reused_rows = 0  # rows of the shards written here, until ``advance`` (the progress) is set
        self.advance: Callable[[int], None] = self._count

    def _count(self, n: int) -> None:
        self.reused_rows += n

    def __iter__(self) -> Iterator[tuple[int, pa.Table, Part | None]]:
        window: list[tuple[int, pa.Table]] = []
        rows = size = 0
        for i, shard in enumerate(self.shards):
            self.count = i + 1
            if i not in self.done:
                window.append((i, shard))
                rows, size = rows + shard.num_rows, size + shard.nbytes
            # a streamed input: the window also closes when the next shard is not cut yet (it waits upstream)
            waiting = isinstance(self.shards, Ahead) and not self.shards.ready()
            if window and (self.node.stage.rows is None or rows >= WINDOW_ROWS or size >= WINDOW_BYTES or waiting):
                yield from self._window(window)
                window, rows, size = [], 0, 0
        yield from self._window(window)

    def _window(self, window: list[tuple[int, pa.Table]]) -> Iterator[tuple[int, pa.Table, Part | None]]:
        rows = self.node.stage.rows
        if rows is None or not window:
            yield from ((i, t, None) for i, t in window)
            return
        parts = reuse.plan(self.store, self.node, [t for _, t in window], self.context, list(range(len(window))),
                           self.look_up)
        for (i, table), part in zip(window, parts):
            if part.idle:  # every row reused: written here, nothing opened
                _compute_and_write(str(self.store.root), self.node.stage.name, self.node.key, i, table, None, part,
                                   rows)
                self.advance(table.num_rows)
                if self.output is not None:
                    self.output.wrote(i)
            else:
                yield i, table, part


def _computed(store: StageStore, node: Node, work: Iterable[tuple[int, pa.Table, Part | None]],
              compute: Callable[..., pa.Table], context: dict, first: list,
              counts: ShardCounts) -> Iterator[tuple[int, int, float, float, str, str | None]]:
    """Compute and write the shards of ``work`` (``first``: those already taken from it), yielding (shard, its
    rows, when it began and ended, host, Ray node) as each finishes. On Ray at most ``IN_FLIGHT_PER_CPU`` x the
    cluster's CPUs are submitted and not yet written: the next shard is taken from ``work`` (and so read) only when one
    is done, so the driver holds a bounded number of shards whatever the size of the build. A stage that
    reports its work (``Stage.reports``) tells ``counts`` how far each running shard is."""
    root, name, key, rows = str(store.root), node.stage.name, node.key, node.stage.rows
    several = len(first) > 1
    work = itertools.chain(_handed(first), work)
    reports = node.stage.reports
    if node.stage.executor == "ray" and (several or ray_up()):
        ray = ensure_ray()
        remote = ray.remote(_compute_and_write)
        ctx = {k: ray.put(v) for k, v in context.items()}
        bound = in_flight_bound()
        pending: dict = {}
        polled = RayCounts(counts) if reports else None
        try:
            for i, table, part in work:
                while len(pending) >= bound:
                    yield _finished(ray, pending, polled)
                extra = {} if part is None else {"part": part, "rows": rows}
                if polled is not None:
                    extra["progress"] = polled.start(i, table.num_rows)
                pending[remote.remote(root, name, key, i, table, compute, **extra, **ctx)] = (i, table.num_rows)
            while pending:
                yield _finished(ray, pending, polled)
        finally:
            if polled is not None:
                polled.close()
    else:
        for i, table, part in work:
            extra = {} if part is None else {"part": part, "rows": rows}
            if reports:
                extra["progress"] = counts.start(i, table.num_rows)
            yield (i, table.num_rows, *_compute_and_write(root, name, key, i, table, compute, **extra, **context))


def _handed(items: list) -> Iterator:
    """The items of ``items``, each taken out of the list as it is handed on: a shard computed is not held
    (by the caller's list) while the rest are."""
    while items:
        yield items.pop(0)


def in_flight_bound() -> int:
    """How many shards the driver submits to Ray before it waits for one: ``IN_FLIGHT_PER_CPU`` per CPU."""
    import ray

    return max(1, int(IN_FLIGHT_PER_CPU * ray.cluster_resources().get("CPU", 1)))


def _finished(ray, pending: dict, polled: RayCounts | None) -> tuple[int, int, float, float, str, str | None]:
    """The next shard to finish (reading the running shards' counts while it waits, and as shards finish,
    every ``POLL_S``: ``polled``)."""
    while True:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=None if polled is None else shard_progress.POLL_S)
        if polled is not None:
            polled.poll()
        if ready:
            break
    return (*pending.pop(ready[0]), *ray.get(ready[0]))


def run_node(store: StageStore, node: Node, reuse_rows: bool = True, output: Output | None = None) -> Manifest:
    """Compute ``node`` unless committed (resuming its written shards); returns the manifest, with
    ``cached`` saying whether it was committed already. ``reuse_rows=False`` (``--fresh``, a recipe's
    ``reuse: false``): a committed output is computed again, and no row is taken from the store.

    One loop for every stage: its shards as they come (``plan_shards`` of ``stage.table``, or ``cut`` from
    ``stage.stream``: each shard read only when it is to be computed), their rows looked up a window at a
    time, computed in process or on Ray with a bounded number in flight, each written as it finishes. A
    rerun skips the shards already written: the shard plan is the shards' row counts, or a streamed
    stage's limits (the same limits over the same input give the same shards).

    In a streaming build (``bonforge.engine.streaming``) inputs may still be computing: it waits for those but
    the streamed one, whose shards it cuts as they are written; ``output`` hears of each shard written."""
    stage, key = node.stage, node.key
    if reuse_rows and store.exists(stage.name, key):
        if output is not None:
            output.last(len(store.done_shards(stage.name, key)))
        return store.manifest(stage.name, key).with_cached(True)
    if not reuse_rows:  # nothing of an earlier computation: neither its commit nor its shards
        store.uncommit(stage.name, key)
    refs = resolved(node)
    inputs = StoreInputs(store, refs, node.params)
    if stage.stream is not None:
        shards: Iterable[pa.Table] = streams.cut(stage.stream(inputs), stage.shard_rows, stage.shard_bytes)
        if pending(refs):
            shards = Ahead(shards)
        plan = [-1, stage.shard_rows or 0, stage.shard_bytes or 0]
    else:
        table = stage.table(inputs) if stage.table else pa.table({"problem_id": pa.array([], pa.string())})
        shards = plan_shards(table, stage.shard_rows)
        plan = [s.num_rows for s in shards]
    done = store.begin(stage.name, key, plan)
    for i in sorted(done) if output is not None else ():
        output.wrote(i)
    if done:
        log.info("%s: resuming, %d shards already written", node.label, len(done))
    t0 = time.perf_counter()
    context = stage.context(inputs) if stage.context else {}
    work = _Plan(store, node, shards, done, context, reuse_rows, output)
    compute_s, hosts, per_node, spans = 0.0, set(), Counter(), []
    from bonforge.runtime.progress import stage_progress

    taken = iter(work)
    # nothing to compute: nothing opened; one shard: no Ray (an input read as written: the first shard starts at once)
    first = list(itertools.islice(taken, 1 if isinstance(shards, Ahead) else 2))
    resumed_rows = sum(plan[i] for i in done if i < len(plan)) if stage.stream is None else 0
    with _opened(node) if first else contextlib.nullcontext(None) as compute:
        with stage_progress(node.label, _total(node, plan), resumed_rows) as advance:
            work.advance = advance  # shards whose every row is reused, written as the plan comes
            advance(work.reused_rows)
            counts = ShardCounts(advance)
            for i, n_rows, began, ended, host, ray_node in _computed(store, node, taken, compute, context, first,
                                                                     counts):
                compute_s += ended - began
                spans.append((began, ended))
                hosts.add(host)
                if ray_node:
                    per_node[ray_node] += 1
                counts.finish(i, n_rows)
                if output is not None:
                    output.wrote(i)
        wall = time.perf_counter() - t0
        written = Shards(store, node, work.count, compute)
        summary = stage.summary(written) if stage.summary else {}
    if output is not None:
        output.last(work.count)
    if stage.rows is not None:
        summary.update(reuse.commit_rows(store, node, work.count))
    resumed = sorted(done & set(range(work.count)))
    man = store.commit(
        stage.name,
        key,
        work.count,
        version=stage.version,
        config=node.config,
        upstream=node.upstream_keys,
        timings={"wall_s": round(wall, 4), "compute_s": round(compute_s, 4), "busy": busy(spans)},
        extra={
            "hosts": sorted(hosts),
            "ray_nodes": sorted(per_node),
            "shards_per_node": dict(sorted(per_node.items())),  # Ray node id -> the shards it computed
            "shards_resumed": len(resumed),
            "rows_resumed": reuse.computed_rows(store, node, resumed),
            **({"streamed": True} if stage.stream else {}),
            **node.note,
            **summary,
        },
        compact_rows=stage.compact_rows,
    )
    return man.with_cached(False)


def _total(node: Node, plan: list[int]) -> int | None:
    """The rows of the progress bar: the shard plan's, or a streamed stage's input's (``Stage.stream_of``, from
    its manifests); None where unknown."""
    if node.stage.stream is None:
        return sum(plan)
    rows = [r.manifest and r.manifest.rows for r in node.inputs.get(node.stage.stream_of or "", [])]
    return sum(rows) if rows and None not in rows else None
