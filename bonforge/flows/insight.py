"""Stages that look at a finished build: max@k weights and selector evaluation.

Each binds its stage (``stages/select_eval.py``, ``stages/maxk.py``) to the outputs of a recorded run, runs
it with ``bonforge.engine.run_node`` (keyed, resumable, never recomputed), then records a *derived run*: the base run's
stages plus the new one, ``kind`` and ``base_run`` naming where it came from. The catalog of that run
(the latest, so `bonforge sql` shows it by default) has a view of the new stage beside the others.
"""

from __future__ import annotations

import logging
import time
from typing import Literal

from bonforge.config import Recipe
from bonforge.engine import run_node
from bonforge.engine.shards import StoreInputs
from bonforge.storage.run_record import RunRecord
from bonforge.errors import DataError, StoreError
from bonforge.llm.base import Engine
from bonforge.llm.config import SampledTeacher
from bonforge.manifest import Manifest
from bonforge.stage import Node, Ref
from bonforge.storage.store import StageStore
from bonforge.stages import maxk, select_eval

log = logging.getLogger("bonforge")


def latest_run(store: StageStore, recipe: Recipe) -> dict:
    """The latest succeeded run of exactly this recipe (same settings and overrides)."""
    want = recipe.model_dump(mode="json")
    for run in reversed(store.runs()):
        if run.status == "succeeded" and run.recipe == want and "genselect" in run.stages:
            return run
    raise StoreError(
        f"no succeeded run of recipe {recipe.name!r} with these settings in {store.root}; "
        "run `bonforge run RECIPE` with the same --set options first"
    )


def record_derived(store: StageStore, base: dict, kind: str, node: Node, manifest: Manifest, secs: float,
                   **fields) -> dict:
    record = RunRecord.derived(base, kind, node.stage.name, node.key, node.label, manifest.cached, secs, **fields)
    store.record_run(record)
    return record.json()


def _refs(store: StageStore, run: dict, stages: tuple[str, ...]) -> dict[str, list[Ref]]:
    """The run's committed outputs of ``stages``."""
    missing = [s for s in stages if s not in run.stages]
    if missing:
        raise StoreError(f"run {run.run_id} has no {missing[0]!r} stage")
    return {s: [Ref(s, k, store.manifest(s, k)) for k in run.stages[s]] for s in stages}


def _check_ks(store: StageStore, base: RunRecord, verdicts: list[Ref], ks: list[int], pool: bool) -> None:
    """A k larger than every group gives no weights: an error naming the largest group (and ``--pool``, which
    groups a problem's candidates of every teacher) rather than a silent empty stage; a warning when only
    some of ``ks`` are too large."""
    by = "problem_id" if pool else "problem_id, teacher"
    largest = StoreInputs(store, {"verdicts": verdicts}).sql(
        f"SELECT coalesce(max(n), 0) AS n FROM (SELECT count(*) AS n FROM verdicts GROUP BY {by})").column("n")[0]
    largest = largest.as_py()
    too_big = sorted(k for k in set(ks) if k > largest)
    if not too_big:
        return
    what = "candidates per problem" if pool else "candidates per problem and teacher"
    hint = "" if pool else " (--pool weighs every teacher's candidates of a problem together)"
    if len(too_big) == len(set(ks)):
        raise DataError(f"run {base.run_id} has at most {largest} {what}: no weights for k = "
                        f"{', '.join(map(str, too_big))}{hint}")
    log.warning("run %s has at most %d %s: no weights for k = %s%s", base.run_id, largest, what,
                ", ".join(map(str, too_big)), hint)


def eval_selector(
    store: StageStore,
    recipe: Recipe,
    teacher: SampledTeacher,
    runs: int = 1,
    skip_unanimous: bool = False,
    prompts: Literal["genselect", "pool"] = "genselect",
    engine: Engine | None = None,
) -> tuple[dict, dict]:
    """Evaluate ``teacher`` as a selector on the latest run of ``recipe``; returns (record, summary).

    ``prompts="genselect"``: the run's GenSelect prompts. ``"pool"``: one prompt per problem over all its
    candidates (``select_eval.pool_prompts``), the inference-time setting where unanimity occurs."""
    t0 = time.perf_counter()
    base = latest_run(store, recipe)
    refs = _refs(store, base, select_eval.READS[prompts])
    node = select_eval.node(recipe, teacher, runs, skip_unanimous, prompts, refs, engine)
    man = run_node(store, node)
    summary = select_eval.summarize(store.read("selector_eval", node.key))
    record = record_derived(
        store,
        base,
        "eval-selector",
        node,
        man,
        time.perf_counter() - t0,
        selector={"engine": teacher.engine, "model": teacher.model},
        summary=summary,
    )
    return record, summary


def maxk_weights(store: StageStore, run_id: str | None, ks: list[int] | None, pool: bool) -> tuple[dict, Manifest]:
    """The ``maxk_weights`` stage of a run's verdicts; returns (record, manifest). ``ks`` default: the
    recipe's ``score.ks``, else 1, 2, 4, ... up to each group's size."""
    t0 = time.perf_counter()
    base = store.run(run_id)
    ks = ks or (base.recipe or {}).get("score", {}).get("ks")
    verdicts = _refs(store, base, ("verdicts",))["verdicts"]
    if ks:
        _check_ks(store, base, verdicts, ks, pool)
    node = maxk.node(verdicts, ks, pool)
    man = run_node(store, node)
    record = record_derived(store, base, "maxk", node, man, time.perf_counter() - t0)
    return record, man
