"""Prefect and Ray around the DAG: one Prefect task per stage (cache key = stage key), the build flow, and
the start of the services it needs. Imported only when a build has something to compute."""

from __future__ import annotations

import logging
import os
import threading
import time

from prefect import flow, task

from bonforge.config import Recipe
from bonforge.flows.build import _execute, _Runner
from bonforge.flows.stages import Ref, Step
from bonforge.runner import ensure_ray
from bonforge.storage.store import StageStore

log = logging.getLogger("bonforge")


@task(
    name="stage",
    retries=2,
    retry_delay_seconds=2,
    persist_result=True,
    result_serializer="json",
    cache_key_fn=lambda ctx, params: f"{params['step'].stage}-{params['step'].key}",
)
def stage_task(step: Step) -> dict:
    return step.run()


class PrefectRunner(_Runner):
    """Runs each step as a Prefect task (inside the build flow)."""

    def __call__(self, step: Step) -> Ref:
        t0 = time.perf_counter()
        committed = self.store.exists(step.stage, step.key)
        state = stage_task.with_options(
            task_run_name=step.label,
            result_storage=self.store.root / "prefect-results",
            refresh_cache=not committed,
        )(step, return_state=True)
        manifest = state.result()
        cached = committed or state.name == "Cached"
        return self._note(step, manifest, cached, time.perf_counter() - t0)


@flow(name="bonforge-build", log_prints=False, validate_parameters=False)
def build_flow(recipe: Recipe, store_root: str, recipe_dir: str = ".", run_id: str | None = None) -> dict:
    store = StageStore(store_root)
    try:
        return _execute(recipe, store, recipe_dir, run_id, PrefectRunner(store), record_start=True)
    finally:
        stop_sandboxes()


def stop_sandboxes() -> None:
    """Stop the per-node sandbox pools (their containers) that code verification started."""
    import ray

    if ray.is_initialized():
        from bonforge.sandbox.ray_pool import shutdown_node_pools

        shutdown_node_pools()


def start_services(recipe: Recipe) -> None:
    """Start Prefect's temporary server (when no PREFECT_API_URL is set) and Ray side by side: each takes
    seconds, and the build needs both."""
    server, failed = None, []
    if not os.environ.get("PREFECT_API_URL"):
        from prefect.server.api.server import SubprocessASGIServer

        def start() -> None:
            try:
                SubprocessASGIServer().start(timeout=180)  # generous: a loaded 2-core machine is slow
            except Exception as e:  # leave it to the flow to start (and report) the server itself
                failed.append(e)
                SubprocessASGIServer().stop()

        server = threading.Thread(target=start, daemon=True)
        server.start()
    ensure_ray(recipe.ray.address, recipe.ray.num_cpus)  # verification runs on Ray
    if server is not None:
        server.join()
        if failed:
            log.warning("Prefect's temporary server did not start early (%s); retrying in the flow", failed[0])
