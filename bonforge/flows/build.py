"""The build flow. It reads like the DAG:

    problems ─► candidates (per teacher) ─► verdicts (per teacher) ─► problem_stats ─► genselect ─► dataset

Each stage is one Prefect task whose cache key is the stage key; the store's manifests are the source of
truth, so a task is only served from Prefect's cache while its stage is committed in the store.
Parallel work inside a stage runs on Ray (see ``bonforge.runner``).
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

from prefect import flow, task

from bonforge.config import Recipe
from bonforge.flows.stages import Build, Ref, Step
from bonforge.storage.store import StageStore

log = logging.getLogger("bonforge")


@task(name="stage", retries=2, retry_delay_seconds=2, persist_result=True, result_serializer="json",
      cache_key_fn=lambda ctx, params: f"{params['step'].stage}-{params['step'].key}")
def stage_task(step: Step) -> dict:
    return step.run()


class Runner:
    """Runs steps as Prefect tasks and remembers what each did (for the run record)."""

    def __init__(self, store: StageStore):
        self.store = store
        self.record: dict[str, list[str]] = {}
        self.cached: dict[str, list[str]] = {}
        self.timings: dict[str, float] = {}
        self._storage = store.root / "prefect-results"

    def __call__(self, step: Step) -> Ref:
        t0 = time.perf_counter()
        committed = self.store.exists(step.stage, step.key)
        state = stage_task.with_options(
            task_run_name=step.label, result_storage=self._storage, refresh_cache=not committed,
        )(step, return_state=True)
        manifest = state.result()
        cached = committed or state.is_completed() and state.name == "Cached"
        self.record.setdefault(step.stage, []).append(step.key)
        if cached:
            self.cached.setdefault(step.stage, []).append(step.key)
        secs = time.perf_counter() - t0
        self.timings[step.label] = round(secs, 3)
        log.info("%-28s %8s rows  %s  (key %s)", step.label, manifest.get("rows"),
                 "cached" if cached else f"computed in {secs:.1f}s", step.key)
        return Ref(step.stage, step.key, manifest)


@flow(name="bonforge-build", log_prints=False, validate_parameters=False)
def build(recipe: Recipe, store_root: str, recipe_dir: str = ".", run_id: str | None = None) -> dict:
    store = StageStore(store_root)
    b = Build(store, recipe, Path(recipe_dir))
    run = Runner(store)
    record = {
        "run_id": run_id or time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6],
        "recipe_name": recipe.name, "recipe": recipe.model_dump(mode="json"), "status": "running",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "stages": run.record, "cached": run.cached,
    }
    store.record_run(record)
    t0 = time.perf_counter()
    try:
        problems = run(b.problems())
        candidates = [run(b.candidates(problems, t)) for t in recipe.teachers]
        verdicts = [run(b.verdicts(problems, c)) for c in candidates]
        stats = run(b.problem_stats(verdicts))
        genselect = run(b.genselect(problems, candidates, verdicts, stats))
        dataset = b.export(genselect, lineage={"recipe": recipe.name, "run_id": record["run_id"],
                                               "stages": run.record})
        record.update(status="succeeded", dataset=dataset["path"], dataset_version=dataset["version"])
    except BaseException as e:
        record.update(status="failed", error=f"{type(e).__name__}: {e}"[:2000])
        raise
    finally:
        record.update(finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      wall_s=round(time.perf_counter() - t0, 3), timings=run.timings)
        store.record_run(record)
    return record
