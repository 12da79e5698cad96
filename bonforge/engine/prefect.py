"""Prefect around the DAG: one Prefect task per node (cache key = stage key) and the build flow, run inside
the services a build needs (``bonforge.services.for_build``): node after node (``PrefectRun``), or with
``engine.streaming`` every node at once, each as soon as what it reads exists (``StreamingPrefectRun``).
Imported only when a build has something to compute."""

from __future__ import annotations

import contextlib
import logging
import time

import prefect.flow_engine

from prefect import flow, task
from prefect.context import TaskRunContext

from bonforge.config import Recipe
from bonforge import services
from bonforge.storage.run_record import RunRecord
from bonforge.engine.run import Dag, Run, StreamingRun, execute, failing_as
from bonforge.engine.streaming import Output
from bonforge.runtime.cluster import ray_up
from bonforge.engine.shards import run_node
from bonforge.errors import BonforgeError, TransientError
from bonforge.manifest import Manifest
from bonforge.report import report_after_build
from bonforge.stage import Node, Ref
from bonforge.storage.store import StageStore

log = logging.getLogger("bonforge")
# Prefect's flow engine swaps SIGTERM's handler for its own (for a runner's cancellations, which bonforge's local
# flows never get), then sends the signal to the process again once the flow has crashed: a second signal to
# ``runtime.interrupt``, which ends the build at once instead of stopping it cleanly. Keep the build's handler.
if hasattr(prefect.flow_engine, "capture_sigterm"):
    prefect.flow_engine.capture_sigterm = contextlib.nullcontext


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
def stage_task(store_root: str, node: Node, reuse_rows: bool = True, output: Output | None = None,
               began: float | None = None) -> dict:
    """The manifest as JSON data (Prefect keeps task results as JSON); ``output``: a streaming build's;
    ``began``: when the first try began (a retry gets the same parameters: its ``wall_s`` covers every try); a
    retry keeps what the earlier tries wrote, also in a build that reuses nothing (``--fresh``)."""
    context = TaskRunContext.get()
    again = context is not None and context.task_run.run_count > 1
    return run_node(StageStore(store_root), node, reuse_rows, output, began, again).json()


def _task(store: StageStore, node: Node, reuse: bool, output: Output | None = None) -> tuple[Manifest, float]:
    """``node`` computed by its Prefect task: the manifest, and the seconds it took."""
    t0 = time.perf_counter()
    state = stage_task.with_options(
        task_run_name=node.label,
        result_storage=store.result_storage(),
        refresh_cache=True,  # not committed: a cached result of Prefect's would be stale
    )(str(store.root), node, reuse, output, time.time(), return_state=True)
    with failing_as(node):
        return Manifest.from_json(state.result()), time.perf_counter() - t0


class PrefectRun(Run):
    """Runs each node that is not committed yet as a Prefect task (inside the build flow); a committed node
    is read from the store, as in ``CommittedRun``: it needs nothing computed, so it gets no task."""

    def __call__(self, node: Node) -> Ref:
        if node.key in self.done:  # computed early, by this build
            manifest, secs = self.done[node.key]
            return self._note(node, manifest, False, secs)
        if self.recipe.reuse and self.store.exists(node.stage.name, node.key):
            return self._note(node, self.store.manifest(node.stage.name, node.key), True, 0.0)
        manifest, secs = _task(self.store, node, self.recipe.reuse)
        return self._note(node, manifest, manifest.cached, secs)


class StreamingPrefectRun(StreamingRun):
    """``engine.streaming``: every node started at once on a thread of its own (``StreamingRun``), computed by
    its Prefect task, one per node as in ``PrefectRun``."""

    def compute(self, node: Node, output: Output) -> Manifest:
        return _task(self.store, node, self.recipe.reuse, output)[0]


@flow(name="bonforge-build", log_prints=False, validate_parameters=False)
def build_flow(dag: Dag, recipe: Recipe, store_root: str, recipe_dir: str = ".", run_id: str | None = None,
               done: dict[str, tuple[Manifest, float]] | None = None, since: float | None = None) -> RunRecord:
    run = (StreamingPrefectRun if recipe.engine.streaming else PrefectRun)(StageStore(store_root), recipe, done)
    try:
        return execute(dag, run, recipe_dir, run_id, record_start=True, since=since)
    finally:
        stop_sandboxes()


def compute(dag: Dag, recipe: Recipe, store_root: str, recipe_dir: str, run_id: str | None,
            done: dict[str, tuple[Manifest, float]], since: float | None = None) -> RunRecord:
    """The build flow with its services, then the report: what a build that has something to compute does
    after its early stages (in the caller, or in the warm builder of ``bonforge up``); ``since``: when the
    build began (epoch seconds), for the record's wall time."""
    with services.for_build(recipe):
        record = build_flow(dag, recipe, store_root, recipe_dir, run_id, done, since)
    report_after_build(store_root, record)
    return record


def stop_sandboxes() -> None:
    """Stop the sandbox pools and checkers (their containers) that code verification started: this process's
    own (a stage run in process) and the per-node pools on Ray (none when this process never imported Ray: a
    build that ran no stage on Ray does not import it here either)."""
    from bonforge.sandbox.check_host import close_check_hosts
    from bonforge.sandbox.pool import close_shared_pools

    close_shared_pools()
    close_check_hosts()
    if ray_up():
        from bonforge.sandbox.ray_pool import shutdown_node_pools

        shutdown_node_pools()
