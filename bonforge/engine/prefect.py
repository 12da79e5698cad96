"""Prefect and Ray around the DAG: one Prefect task per node (cache key = stage key), the build flow, and
the start of the services it needs. Imported only when a build has something to compute."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator

from prefect import flow, task

from bonforge.config import Recipe
import bonforge.services.warm as warm
from bonforge.services.builder import prefect_settings_from_caller
from bonforge.services.prefect_server import TemporaryServer, drain_prefect_clients
from bonforge.engine.run import Dag, Run, execute, failing_as
from bonforge.engine.shards import ensure_ray, ray_up, run_node
from bonforge.errors import BonforgeError, TransientError
from bonforge.report import report_after_build
from bonforge.stage import Node, Ref
from bonforge.storage.store import StageStore

log = logging.getLogger("bonforge")


def _may_help(task, task_run, state) -> bool:
    """Whether a retry may help: not after bad input or another terminal bonforge error."""
    error = state.result(raise_on_failure=False)
    return isinstance(error, TransientError) or not isinstance(error, BonforgeError)


@task(
    name="stage",
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=_may_help,
    persist_result=True,
    result_serializer="json",
    cache_key_fn=lambda ctx, params: f"{params['node'].stage.name}-{params['node'].key}",
)
def stage_task(store_root: str, node: Node, reuse_rows: bool = True) -> dict:
    return run_node(StageStore(store_root), node, reuse_rows)


class PrefectRun(Run):
    """Runs each node that is not committed yet as a Prefect task (inside the build flow); a committed node
    is read from the store, as in ``CommittedRun``: it needs nothing computed, so it gets no task."""

    def __call__(self, node: Node) -> Ref:
        if node.key in self.done:  # computed early, by this build
            manifest, secs = self.done[node.key]
            return self._note(node, manifest, False, secs)
        if self.recipe.reuse and self.store.exists(node.stage.name, node.key):
            return self._note(node, self.store.manifest(node.stage.name, node.key), True, 0.0)
        t0 = time.perf_counter()
        state = stage_task.with_options(
            task_run_name=node.label,
            result_storage=self.store.result_storage(),
            refresh_cache=True,  # not committed: a cached result of Prefect's would be stale
        )(str(self.store.root), node, self.recipe.reuse, return_state=True)
        with failing_as(node):
            manifest = state.result()
        return self._note(node, manifest, manifest.get("cached", False), time.perf_counter() - t0)


@flow(name="bonforge-build", log_prints=False, validate_parameters=False)
def build_flow(dag: Dag, recipe: Recipe, store_root: str, recipe_dir: str = ".", run_id: str | None = None,
               done: dict[str, tuple[dict, float]] | None = None) -> dict:
    try:
        return execute(dag, PrefectRun(StageStore(store_root), recipe, done), recipe_dir, run_id, record_start=True)
    finally:
        stop_sandboxes()


def compute(dag: Dag, recipe: Recipe, store_root: str, recipe_dir: str, run_id: str | None,
            done: dict[str, tuple[dict, float]]) -> dict:
    """The build flow with its services, then the report: what a build that has something to compute does
    after its early stages (in the caller, or in the warm builder of ``bonforge up``)."""
    with services(recipe):
        record = build_flow(dag, recipe, store_root, recipe_dir, run_id, done)
    report_after_build(store_root, record)
    return record


def stop_sandboxes() -> None:
    """Stop the per-node sandbox pools (their containers) that code verification started (none when this
    process never imported Ray: a build that ran no stage on Ray does not import it here either)."""
    if ray_up():
        from bonforge.sandbox.ray_pool import shutdown_node_pools

        shutdown_node_pools()


@contextlib.contextmanager
def services(recipe: Recipe) -> Iterator[None]:
    """Prefect's API and Ray for one build.

    Configured ones come first (``PREFECT_API_URL`` or a profile; the recipe's ``ray.address`` or
    ``RAY_ADDRESS``), then the warm services of ``bonforge up`` (Ray joined only when a stage needs it).
    Otherwise a temporary Prefect server runs for the build while a local Ray starts beside it: the same
    uvicorn command Prefect uses for its own temporary server, launched here straight away and without
    importing Prefect's server code into this process (Prefect's way imports it here first, ~4 s, then
    again in the server). It stops when the build ends, or when this process dies.

    A flow run on one of these servers of ours sends no heartbeats: they serve to find crashed runs on a
    server that outlives them, and Prefect waits up to 2 s at the end of a flow for its heartbeat thread
    (0.9 s of a 3.2 s filter change with `bonforge up`, profiled). Flows on a configured server keep them."""
    from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    prefect_settings_from_caller()  # in the warm builder: the caller's, not the builder's
    up = warm.current()
    url = None if PREFECT_API_URL.value() else up and up["prefect"]["url"]
    ray_env = {} if recipe.ray.address or os.environ.get("RAY_ADDRESS") or not up else warm.ray_env(up)
    if up and (url or ray_env):
        log.info("using the services of `bonforge up`:%s%s", f" Prefect at {url}" if url else "",
                 f" Ray at {ray_env['RAY_ADDRESS']}" if ray_env else "")
    server = None if PREFECT_API_URL.value() or url else TemporaryServer()
    try:
        if not ray_env:
            ensure_ray(recipe.ray.address, recipe.ray.num_cpus)  # meanwhile the server starts
        url = server.wait() if server else url
        ours = {PREFECT_API_URL: url, PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}
        with temporary_settings(updates=ours) if url else contextlib.nullcontext(), _environ(ray_env):
            yield
    finally:
        if server:
            drain_prefect_clients()
            server.stop()


@contextlib.contextmanager
def _environ(updates: dict[str, str]) -> Iterator[None]:
    """``updates`` in ``os.environ`` for the block (Ray reads its address and token there)."""
    old = {k: os.environ.get(k) for k in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
