"""The build. ``dag`` reads like the DAG:

    problems ─► candidates (per teacher) ─► verdicts (per teacher) ─► problem_stats ─► genselect ─► dataset

``build`` runs it as a Prefect flow (``orchestrate.py``: one task per stage, cache key = stage key; the
store's manifests are the source of truth, so a task is only served from Prefect's cache while its stage
is committed in the store). Parallel work inside a stage runs on Ray (see ``bonforge.runner``).

A build whose every stage is already committed has nothing to orchestrate: ``build`` then walks the same
DAG against the store alone, without starting Prefect or Ray, records the run and returns in seconds.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from bonforge.config import Recipe
from bonforge.errors import BonforgeError
from bonforge.flows.stages import Build, Ref, Step
from bonforge.report import report_after_build
from bonforge.storage.store import StageStore, new_run_id, utc_now

log = logging.getLogger("bonforge")


def dag(b: Build, run) -> dict:
    """The DAG itself; ``run`` turns a Step into a committed Ref."""
    problems = run(b.problems())
    candidates = [run(b.candidates(problems, t)) for t in b.recipe.teachers]
    if b.recipe.problems.include_reference:
        candidates.append(run(b.reference(problems)))
    verdicts = [run(b.verdicts(problems, c)) for c in candidates]
    stats = run(b.problem_stats(verdicts))
    genselect = run(b.genselect(problems, candidates, verdicts, stats))
    dataset = b.export(genselect, lineage={"recipe": b.recipe.name, "stages": dict(run.record)})
    if b.recipe.export.rl:
        lineage = {"recipe": b.recipe.name, "stages": dict(run.record)}
        dataset["rl_dataset"] = b.export_rl(problems, candidates, verdicts, stats, lineage)
    if b.recipe.fusion:
        pools = run(b.fusion_pools(problems, candidates, verdicts, stats))
        fused = run(b.fused(pools))
        fused_verdicts = run(b.verdicts(problems, fused))
        selection = run(b.fusion_select(problems, pools, candidates, verdicts)) if b.recipe.fusion.selector else None
        run(b.fusion(problems, pools, candidates, verdicts, fused, fused_verdicts, selection))
        dataset["fusion_dataset"] = b.export_fusion(
            problems, fused, fused_verdicts, lineage={"recipe": b.recipe.name, "stages": dict(run.record)}
        )
    return dataset


class _Runner:
    """Remembers what each step did, for the run record."""

    def __init__(self, store: StageStore):
        self.store = store
        self.record: dict[str, list[str]] = {}
        self.cached: dict[str, list[str]] = {}
        self.timings: dict[str, float] = {}

    quiet = False

    def _note(self, step: Step, manifest: dict, cached: bool, secs: float) -> Ref:
        self.record.setdefault(step.stage, []).append(step.key)
        if cached:
            self.cached.setdefault(step.stage, []).append(step.key)
        self.timings[step.label] = round(secs, 3)
        if not self.quiet:
            log.info(
                "%-36s %8s rows  %s  (key %s)",
                step.label,
                manifest.get("rows"),
                "cached" if cached else f"computed in {secs:.1f}s",
                step.key,
            )
        return Ref(step.stage, step.key, manifest)


class NotCommitted(BonforgeError):
    """A stage of the build must be computed."""


class CommittedRunner(_Runner):
    """Reads each step from the store; raises NotCommitted at the first stage that needs work."""

    quiet = True

    def __call__(self, step: Step) -> Ref:
        if not self.store.exists(step.stage, step.key):
            raise NotCommitted(step.label)
        return self._note(step, self.store.manifest(step.stage, step.key), True, 0.0)


def _execute(
    recipe: Recipe, store: StageStore, recipe_dir: str, run_id: str | None, run: _Runner, record_start: bool
) -> dict:
    record = {
        "run_id": run_id or new_run_id(),
        "recipe_name": recipe.name,
        "recipe": recipe.model_dump(mode="json"),
        "status": "running",
        "started": utc_now(),
        "stages": run.record,
        "cached": run.cached,
    }
    if record_start:
        store.record_run(record)
    t0 = time.perf_counter()
    try:
        dataset = dag(Build(store, recipe, Path(recipe_dir)), run)
        record.update(status="succeeded", dataset=dataset["path"], dataset_version=dataset["version"])
        for extra in ("rl_dataset", "fusion_dataset"):
            if extra in dataset:
                record[extra] = dataset[extra]["path"]
    except NotCommitted:
        raise
    except BaseException as e:
        record.update(status="failed", error=f"{type(e).__name__}: {e}"[:2000])
        raise
    finally:
        record.update(
            finished=utc_now(),
            wall_s=round(time.perf_counter() - t0, 3),
            timings=run.timings,
        )
        if record["status"] != "running":
            store.record_run(record)
    return record


def build(recipe: Recipe, store_root: str, recipe_dir: str = ".", run_id: str | None = None) -> dict:
    """Build the recipe's dataset and return the run record."""
    store = StageStore(store_root)
    try:
        record = _execute(recipe, store, recipe_dir, run_id, CommittedRunner(store), record_start=False)
        log.info("every stage is committed (%d stages): nothing to compute", sum(map(len, record["stages"].values())))
        report_after_build(store_root, record, reuse=True)
        return record
    except NotCommitted as e:
        log.info("stage %s must be computed: starting the Prefect flow", e)
    from bonforge.flows.orchestrate import build_flow, services  # Prefect loads only here

    with services(recipe):
        record = build_flow(recipe, store_root, recipe_dir, run_id)
    report_after_build(store_root, record)
    return record
