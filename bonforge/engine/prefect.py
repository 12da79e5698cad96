"""Prefect and Ray around the DAG: one Prefect task per node (cache key = stage key), the build flow, and
the start of the services it needs. Imported only when a build has something to compute."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from prefect import flow, task

from bonforge.config import Recipe
from bonforge.engine.prefect_server import TemporaryServer, drain_prefect_clients
from bonforge.engine.run import Dag, Run, execute
from bonforge.engine.shards import ensure_ray, run_node
from bonforge.stage import Node, Ref
from bonforge.storage.store import StageStore


@task(
    name="stage",
    retries=2,
    retry_delay_seconds=2,
    persist_result=True,
    result_serializer="json",
    cache_key_fn=lambda ctx, params: f"{params['node'].stage.name}-{params['node'].key}",
)
def stage_task(store_root: str, node: Node) -> dict:
    return run_node(StageStore(store_root), node)


class PrefectRun(Run):
    """Runs each node as a Prefect task (inside the build flow)."""

    def __call__(self, node: Node) -> Ref:
        t0 = time.perf_counter()
        committed = self.store.exists(node.stage.name, node.key)
        state = stage_task.with_options(
            task_run_name=node.label,
            result_storage=self.store.result_storage(),
            refresh_cache=not committed,
        )(str(self.store.root), node, return_state=True)
        manifest = state.result()
        cached = committed or state.name == "Cached"
        return self._note(node, manifest, cached, time.perf_counter() - t0)


@flow(name="bonforge-build", log_prints=False, validate_parameters=False)
def build_flow(dag: Dag, recipe: Recipe, store_root: str, recipe_dir: str = ".", run_id: str | None = None) -> dict:
    try:
        return execute(dag, PrefectRun(StageStore(store_root), recipe), recipe_dir, run_id, record_start=True)
    finally:
        stop_sandboxes()


def stop_sandboxes() -> None:
    """Stop the per-node sandbox pools (their containers) that code verification started."""
    import ray

    if ray.is_initialized():
        from bonforge.sandbox.ray_pool import shutdown_node_pools

        shutdown_node_pools()


@contextlib.contextmanager
def services(recipe: Recipe) -> Iterator[None]:
    """Prefect's API and Ray for one build, started side by side.

    With no Prefect API configured (``PREFECT_API_URL`` or a profile), a temporary Prefect server runs for
    the build: the same uvicorn command Prefect uses for its own temporary server, launched here straight
    away and without importing Prefect's server code into this process (Prefect's way imports it here first,
    ~4 s, then again in the server). It stops when the build ends, or when this process dies."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    server = None if PREFECT_API_URL.value() else TemporaryServer()
    try:
        ensure_ray(recipe.ray.address, recipe.ray.num_cpus)  # meanwhile the server starts
        url = server.wait() if server else None
        with temporary_settings(updates={PREFECT_API_URL: url}) if url else contextlib.nullcontext():
            yield
    finally:
        if server:
            drain_prefect_clients()
            server.stop()
