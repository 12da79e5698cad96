"""Run one node: skip it when committed, else compute its missing shards (in process or on Ray), write
each shard atomically as it finishes, then commit the manifest from the node's own identity.

Shards are groups of whole problems (rows sharing a ``problem_id`` never straddle two shards) taken in
``problem_id`` order, so the shard plan is a pure function of the input and a rerun after a crash
recomputes only the shards that are missing. Ray is joined or started in ``bonforge.cluster``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from functools import partial
from typing import Any, Callable, Iterator

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from bonforge.cluster import ensure_ray, ray_up
import bonforge.engine.reuse as reuse
import bonforge.engine.streams as streams
from bonforge.engine.reuse import Part
from bonforge.manifest import Manifest
from bonforge.stage import Node, Params, Ref, Rows
from bonforge.storage.catalog import add_view
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
    """A node's inputs over the store: one DuckDB view per input name, opened on first use."""

    def __init__(self, store: StageStore, refs: dict[str, list[Ref]], params: Params | None = None):
        self.store, self.refs, self.params = store, refs, params
        self._con: duckdb.DuckDBPyConnection | None = None

    def __contains__(self, name: str) -> bool:
        return name in self.refs

    def files(self, name: str) -> list[str]:
        return [str(p) for r in self.refs[name] for p in self.store.paths(r.stage, r.key)]

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = self.store.duckdb()
            for name, refs in self.refs.items():
                add_view(self._con, self.store, name, [(r.stage, r.key) for r in refs])
        return self._con

    def read(self, name: str, columns: list[str] | None = None) -> pa.Table:
        tables = [self.store.read(r.stage, r.key, columns) for r in self.refs[name]]
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


def _compute_and_write(
    root: str, stage: str, key: str, shard: int, table: pa.Table, compute: Callable[..., pa.Table],
    part: Part | None = None, rows: Rows | None = None, **context
) -> tuple[float, str, str | None]:
    """Compute and write one shard (for a stage with row reuse: the rows of ``part`` still to compute,
    merged with its reused ones); returns (seconds, hostname, Ray node id or None)."""
    import socket

    t0 = time.perf_counter()
    if part is None:
        out = compute(table, **context)
    else:
        out = reuse.merge(part, None if part.idle else compute(table, **context, **_todo(part)), rows)
    StageStore(root).write_shard(stage, key, shard, out)
    return time.perf_counter() - t0, socket.gethostname(), _ray_node()


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


def _computed(store: StageStore, node: Node, shards: list[pa.Table], todo: list[int],
              compute: Callable[..., pa.Table], context: dict,
              parts: list[Part] | None) -> Iterator[tuple[int, float, str, str | None]]:
    """Compute and write the shards ``todo``, yielding (shard, seconds, host, Ray node) as each finishes."""
    root, name, key, rows = str(store.root), node.stage.name, node.key, node.stage.rows
    extra = (lambda i: {}) if parts is None else (lambda i: {"part": parts[i], "rows": rows})
    if node.stage.executor == "ray" and (len(todo) > 1 or ray_up()):
        import ray

        ensure_ray()
        remote = ray.remote(_compute_and_write)
        ctx = {k: ray.put(v) for k, v in context.items()}
        pending = {remote.remote(root, name, key, i, shards[i], compute, **extra(i), **ctx): i for i in todo}
        while pending:
            (ready,), _ = ray.wait(list(pending), num_returns=1)
            yield (pending.pop(ready), *ray.get(ready))
    else:
        for i in todo:
            yield (i, *_compute_and_write(root, name, key, i, shards[i], compute, **extra(i), **context))


def run_node(store: StageStore, node: Node, reuse_rows: bool = True) -> Manifest:
    """Compute ``node`` unless committed (resuming its written shards); returns the manifest, with
    ``cached`` saying whether it was committed already. ``reuse_rows=False`` (``--fresh``, a recipe's
    ``reuse: false``): a committed output is computed again, and no row is taken from the store."""
    stage, key = node.stage, node.key
    if reuse_rows and store.exists(stage.name, key):
        return store.manifest(stage.name, key).with_cached(True)
    if not reuse_rows:  # nothing of an earlier computation: neither its commit nor its shards
        store.uncommit(stage.name, key)
    inputs = StoreInputs(store, node.inputs, node.params)
    if stage.stream is not None:
        return run_streamed(store, node, inputs)
    table = stage.table(inputs) if stage.table else pa.table({"problem_id": pa.array([], pa.string())})
    context = stage.context(inputs) if stage.context else {}
    shards = plan_shards(table, stage.shard_rows)
    done = store.begin(stage.name, key, [s.num_rows for s in shards])
    todo = [i for i in range(len(shards)) if i not in done]
    if done:
        log.info("%s: resuming, %d of %d shards already written", node.label, len(done), len(shards))
    t0 = time.perf_counter()
    parts = reuse.plan(store, node, shards, context, todo, reuse_rows) if stage.rows else None
    idle = [i for i in todo if parts and parts[i].idle]  # every row reused: written here, nothing opened
    todo = [i for i in todo if i not in idle]
    compute_s, hosts, per_node = 0.0, set(), Counter()
    from bonforge.progress import stage_progress

    for i in idle:
        store.write_shard(stage.name, key, i, reuse.merge(parts[i], None, stage.rows))
    with _opened(node) if todo else contextlib.nullcontext(None) as compute:
        with stage_progress(node.label, total=sum(shards[i].num_rows for i in todo)) as advance:
            for i, secs, host, ray_node in _computed(store, node, shards, todo, compute, context, parts):
                compute_s += secs
                hosts.add(host)
                if ray_node:
                    per_node[ray_node] += 1
                advance(shards[i].num_rows)
        wall = time.perf_counter() - t0
        written = Shards(store, node, len(shards), compute)
        summary = stage.summary(written) if stage.summary else {}
    if parts is not None:
        summary.update(_row_counts(store, node, parts, written))
    man = store.commit(
        stage.name,
        key,
        len(shards),
        version=stage.version,
        config=node.config,
        upstream=node.upstream_keys,
        timings={"wall_s": round(wall, 4), "compute_s": round(compute_s, 4)},
        extra={
            "hosts": sorted(hosts),
            "ray_nodes": sorted(per_node),
            "shards_per_node": dict(sorted(per_node.items())),  # Ray node id -> the shards it computed
            "shards_resumed": len(done),
            **node.note,
            **summary,
        },
        compact_rows=stage.compact_rows,
    )
    return man.with_cached(False)


def run_streamed(store: StageStore, node: Node, inputs) -> Manifest:
    """Compute a streamed stage in this process: shards as ``cut`` makes them from ``stage.stream``, each
    computed and written before the next is read; a rerun skips the shards already written (the shard plan
    is the stage's limits: the same limits over the same input give the same shards)."""
    from bonforge.progress import stage_progress

    stage, key = node.stage, node.key
    done = store.begin(stage.name, key, [-1, stage.shard_rows or 0, stage.shard_bytes or 0])
    if done:
        log.info("%s: resuming, %d shards already written", node.label, len(done))
    t0 = time.perf_counter()
    compute_s, hosts, n = 0.0, set(), 0
    with _opened(node) as compute, stage_progress(node.label, total=None) as advance:
        for i, shard in enumerate(streams.cut(stage.stream(inputs), stage.shard_rows, stage.shard_bytes)):
            n = i + 1
            if i in done:
                continue
            secs, host, _ = _compute_and_write(str(store.root), stage.name, key, i, shard, compute)
            compute_s += secs
            hosts.add(host)
            advance(shard.num_rows)
        wall = time.perf_counter() - t0
        summary = stage.summary(Shards(store, node, n, compute)) if stage.summary else {}
    man = store.commit(stage.name, key, n, version=stage.version, config=node.config, upstream=node.upstream_keys,
                       timings={"wall_s": round(wall, 4), "compute_s": round(compute_s, 4)},
                       extra={"hosts": sorted(hosts), "ray_nodes": [], "shards_per_node": {},
                              "shards_resumed": len(done & set(range(n))), "streamed": True, **node.note, **summary},
                       compact_rows=stage.compact_rows)
    return man.with_cached(False)


def _row_counts(store: StageStore, node: Node, parts: list[Part], written: Shards) -> dict:
    """The row index (written before the manifest names it) and how many rows were computed and reused."""
    rows = node.stage.rows
    assert rows is not None
    keys = written.read([*rows.keys, *rows.volatile])
    reused = reuse.reused_count(written.shard_metadata())
    return {"row_index": reuse.write_index(store, node, parts, keys),
            "rows_reused": reused, "rows_computed": keys.num_rows - reused}
