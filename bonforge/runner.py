"""Run one stage: skip it when committed, else compute its missing shards (in-process or on Ray),
write each shard atomically as it finishes, then commit the manifest.

Shards are groups of whole problems (rows sharing a ``problem_id`` never straddle two shards) taken in
``problem_id`` order, so the shard plan is a pure function of the input and a rerun after a crash
recomputes only the shards that are missing.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Literal

import pyarrow as pa
import pyarrow.compute as pc

from bonforge.storage.store import StageStore

log = logging.getLogger("bonforge")

Compute = Callable[..., pa.Table]


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


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False, "configure_logging": False}
    if address:
        ray.init(address=address, **kwargs)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False, **kwargs)


def _compute_and_write(
    root: str, stage: str, key: str, shard: int, table: pa.Table, compute: Compute, **context
) -> tuple[int, int, float, str, str | None]:
    """Compute and write one shard; returns (shard, rows, seconds, hostname, Ray node id or None)."""
    import socket

    t0 = time.perf_counter()
    out = compute(table, **context)
    StageStore(root).write_shard(stage, key, shard, out)
    return shard, out.num_rows, time.perf_counter() - t0, socket.gethostname(), _ray_node()


def _ray_node() -> str | None:
    """The id of the Ray node running this process, when it is a Ray worker (hostnames repeat when several
    nodes share a machine)."""
    import sys

    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    return ray.get_runtime_context().get_node_id()


def run_stage(
    store: StageStore,
    stage: str,
    key: str,
    *,
    version: str,
    config: Any,
    upstream: dict[str, str],
    table: pa.Table | Callable[[], pa.Table],
    compute: Compute,
    context: dict | Callable[[], dict] | None = None,
    shard_rows: int | None = None,
    executor: Literal["local", "ray"] = "local",
    label: str | None = None,
    extra: Callable[[list[pa.Table]], dict] | dict | None = None,
    compact_rows: int | None = None,
) -> dict:
    """Compute ``stage`` from ``table`` (sharded) unless committed; returns the manifest.

    ``table`` and ``context`` may be callables: they are only evaluated when the stage must be computed.
    ``compact_rows``: readers get files of about this many rows instead of one per shard (``StageStore.commit``).
    """
    if store.exists(stage, key):
        man = store.manifest(stage, key)
        man["cached"] = True
        return man
    table = table() if callable(table) else table
    context = (context() if callable(context) else context) or {}
    shards = plan_shards(table, shard_rows)
    done = store.begin(stage, key, [s.num_rows for s in shards])
    todo = [i for i in range(len(shards)) if i not in done]
    if done:
        log.info("%s: resuming, %d of %d shards already written", label or stage, len(done), len(shards))
    t0 = time.perf_counter()
    compute_s, hosts, nodes = 0.0, set(), set()
    from bonforge.progress import stage_progress

    with stage_progress(label or stage, total=sum(shards[i].num_rows for i in todo)) as advance:
        if executor == "ray" and len(todo) > 1:
            import ray

            remote = ray.remote(_compute_and_write)
            ctx_ref = {k: ray.put(v) for k, v in context.items()}
            pending = [remote.remote(str(store.root), stage, key, i, shards[i], compute, **ctx_ref) for i in todo]
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                shard, _, secs, host, node = ray.get(ready[0])
                compute_s += secs
                hosts.add(host)
                nodes.add(node)
                advance(shards[shard].num_rows)
        else:
            for i in todo:
                _, _, secs, host, node = _compute_and_write(
                    str(store.root), stage, key, i, shards[i], compute, **context
                )
                compute_s += secs
                hosts.add(host)
                nodes.add(node)
                advance(shards[i].num_rows)
    wall = time.perf_counter() - t0
    extra_fields = extra(shards) if callable(extra) else dict(extra or {})
    man = store.commit(
        stage,
        key,
        len(shards),
        version=version,
        config=config,
        upstream=upstream,
        timings={"wall_s": round(wall, 4), "compute_s": round(compute_s, 4)},
        extra={
            "hosts": sorted(hosts),
            "ray_nodes": sorted(n for n in nodes if n),
            "shards_resumed": len(done),
            **extra_fields,
        },
        compact_rows=compact_rows,
    )
    man["cached"] = False
    return man
