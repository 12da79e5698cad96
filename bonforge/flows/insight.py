"""Stages that look at a finished build: max@k weights and selector evaluation.

Each reads the tables of a recorded run through the DuckDB catalog, computes its stage through
``bonforge.runner`` (keyed, resumable, never recomputed), then records a *derived run*: the base run's
stages plus the new one, ``kind`` and ``base_run`` naming where it came from. The catalog of that run
(the latest, so `bonforge sql` shows it by default) has a view of the new stage beside the others.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Literal

from bonforge.config import Recipe
from bonforge.errors import StoreError
from bonforge.llm.base import Engine
from bonforge.llm.config import SampledTeacher
from bonforge.runner import run_stage
from bonforge.storage.catalog import connect
from bonforge.storage.store import StageStore, new_run_id, stage_key, utc_now
from bonforge.tasks import assemble, maxk, select_eval

PROMPT_SHARD_ROWS = 256
MAXK_SHARD_ROWS = 200_000
_POOL = """
    SELECT c.problem_id, p.question, p.domain, c.candidate_id, c.text, v.correct, v.status, v.extracted
    FROM candidates c JOIN verdicts v USING (candidate_id) JOIN problems p ON p.problem_id = c.problem_id
"""


def latest_run(store: StageStore, recipe: Recipe) -> dict:
    """The latest succeeded run of exactly this recipe (same settings and overrides)."""
    want = recipe.model_dump(mode="json")
    for run in reversed(store.runs()):
        if run.get("status") == "succeeded" and run.get("recipe") == want and "genselect" in run.get("stages", {}):
            return run
    raise StoreError(
        f"no succeeded run of recipe {recipe.name!r} with these settings in {store.root}; "
        "run `bonforge run RECIPE` with the same --set options first"
    )


def record_derived(
    store: StageStore, base: dict, kind: str, stage: str, key: str, manifest: dict, secs: float, **fields
) -> dict:
    now = utc_now()
    cached = {s: list(keys) for s, keys in base["stages"].items() if s != stage}
    if manifest.get("cached"):
        cached[stage] = [key]
    record = {
        "run_id": new_run_id(),
        "kind": kind,
        "base_run": base["run_id"],
        "recipe_name": base.get("recipe_name"),
        "recipe": base.get("recipe"),
        "status": "succeeded",
        "started": now,
        "finished": now,
        "wall_s": round(secs, 3),
        "stages": {**base["stages"], stage: [key]},
        "cached": cached,
        "timings": {stage: round(secs, 3)},
        "dataset": base.get("dataset"),
        "dataset_version": base.get("dataset_version"),
        **fields,
    }
    store.record_run(record)
    return record


def _keys(run: dict, stage: str) -> str:
    if stage not in run["stages"]:
        raise StoreError(f"run {run['run_id']} has no {stage!r} stage")
    return ",".join(sorted(run["stages"][stage]))


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
    con = connect(store, base["run_id"])
    if prompts == "genselect":
        upstream = {"genselect": _keys(base, "genselect"), "verdicts": _keys(base, "verdicts")}
        prompt_cfg: dict = {"source": "genselect"}

        def table():
            extracted = dict(con.sql("SELECT candidate_id, extracted FROM verdicts").fetchall())
            return select_eval.prompt_table(con.sql("SELECT * FROM genselect").to_arrow_table(), extracted)
    else:
        upstream = {s: _keys(base, s) for s in ("problems", "candidates", "verdicts")}
        prompt_cfg = {"source": "pool", "genselect": assemble.key_config(recipe.genselect, recipe.seed)}

        def table():
            return select_eval.pool_prompts(con.sql(_POOL).to_arrow_table(), recipe.genselect, recipe.seed)

    cfg = {
        "selector": select_eval.selector_key(teacher),
        "runs": runs,
        "skip_unanimous": skip_unanimous,
        "prompts": prompt_cfg,
    }
    key = stage_key("selector_eval", select_eval.VERSION, cfg, upstream)
    judge = select_eval.Judge(teacher, runs, skip_unanimous, engine)
    try:
        man = run_stage(
            store,
            "selector_eval",
            key,
            version=select_eval.VERSION,
            config=cfg,
            upstream=upstream,
            table=table,
            compute=judge,
            shard_rows=PROMPT_SHARD_ROWS,
            label="selector_eval",
            extra={"selector": teacher.model, "engine": teacher.engine},
        )
    finally:
        judge.close()
    summary = select_eval.summarize(store.read("selector_eval", key))
    record = record_derived(
        store,
        base,
        "eval-selector",
        "selector_eval",
        key,
        man,
        time.perf_counter() - t0,
        selector={"engine": teacher.engine, "model": teacher.model},
        summary=summary,
    )
    return record, summary


def maxk_weights(store: StageStore, run_id: str | None, ks: list[int] | None, pool: bool) -> tuple[dict, dict]:
    """The ``maxk_weights`` stage of a run's verdicts; returns (record, manifest). ``ks`` default: the
    recipe's ``score.ks``, else 1, 2, 4, ... up to each group's size."""
    t0 = time.perf_counter()
    base = store.run(run_id)
    ks = ks or (base.get("recipe") or {}).get("score", {}).get("ks")
    upstream = {"verdicts": _keys(base, "verdicts")}
    cfg = {"ks": sorted(set(ks)) if ks else None, "pool": pool}
    key = stage_key("maxk_weights", maxk.VERSION, cfg, upstream)
    query = "SELECT problem_id, teacher, candidate_id, reward FROM verdicts ORDER BY problem_id, candidate_id"
    man = run_stage(
        store,
        "maxk_weights",
        key,
        version=maxk.VERSION,
        config=cfg,
        upstream=upstream,
        table=lambda: connect(store, base["run_id"]).sql(query).to_arrow_table(),
        compute=partial(maxk.maxk_table, ks=cfg["ks"], pool=pool),
        shard_rows=MAXK_SHARD_ROWS,
        label="maxk_weights",
    )
    record = record_derived(store, base, "maxk", "maxk_weights", key, man, time.perf_counter() - t0)
    return record, man
