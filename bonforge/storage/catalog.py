"""The DuckDB catalog: one view per stage table of a run (default: the latest that succeeded), plus ``runs`` and
``run_stages`` (each with the rows computed and the rows reused: taken from earlier outputs, and what they cost),
and ``problem_cost`` (``PROBLEM_COST``: what each problem's candidates cost, per teacher, beside whether the
filter kept the problem; docs/cost.md). Views read only
committed stages (those with a manifest), so a query running while a build writes never sees a half-written
stage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import pyarrow as pa

from bonforge.storage.store import StageStore


def connect(store: StageStore, run_id: str | None = None):
    con = store.duckdb()
    runs = store.runs()
    con.register("runs", _runs_table(runs))
    if not runs and run_id is None:
        return con
    run = store.run(run_id)  # a run that is not there: one StoreError naming it
    stage_rows = []
    for stage, keys in run.stages.items():
        add_view(con, store, stage, [(stage, key) for key in keys if store.exists(stage, key)])
        for key in keys:
            man = store.manifest(stage, key) if store.exists(stage, key) else None
            cached = key in run.cached.get(stage, [])
            computed, reused = (0, 0) if cached else man.counts() if man else (None, 0)
            cost = _mapping(man and man.extra.get("cost"))
            stage_rows.append(
                {
                    "run_id": run.run_id,
                    "stage": stage,
                    "teacher": man and man.extra.get("teacher"),  # a per-teacher stage's (candidates, verdicts)
                    "key": key,
                    "rows": man and man.rows,
                    "wall_s": man and man.timings.get("wall_s"),
                    "compute_s": man and man.timings.get("compute_s"),
                    "cached": cached,
                    "rows_computed": computed,
                    "rows_reused": reused,
                    "cost_usd": usd(cost.get("rows_usd")),
                    "spent_usd": 0.0 if cached and cost else usd(cost.get("spent_usd")),
                }
            )
    con.register("run_stages", pa.Table.from_pylist(stage_rows, schema=RUN_STAGES))
    views = {r[0] for r in con.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    if {"candidates", "problem_stats"} <= views and "cost_usd" in con.sql("SELECT * FROM candidates LIMIT 0").columns:
        con.sql(PROBLEM_COST)
    if run.stages.get("candidates") and "messages" in con.sql("SELECT * FROM candidates LIMIT 0").columns:
        con.execute(TRAJECTORY_VIEWS)
    return con


# What each problem's candidates cost, per teacher, and whether the filter kept the problem (null: no verdicts)
PROBLEM_COST = """CREATE VIEW problem_cost AS
SELECT c.problem_id, c.teacher, count(*) AS candidates, sum(c.prompt_tokens) AS prompt_tokens,
       sum(c.completion_tokens) AS completion_tokens, sum(c.cost_usd) AS cost_usd,
       count(*) - count(c.cost_usd) AS unpriced, any_value(s.keep) AS kept
FROM candidates c LEFT JOIN problem_stats s ON s.problem_id = c.problem_id AND s.teacher = '*'
GROUP BY c.problem_id, c.teacher"""


# Trajectories (``candidates.messages``) row by row: ``turns``, one row per message, and ``tool_calls``, one row
# per call with its code and the tool message that answered it.
TRAJECTORY_VIEWS = (Path(__file__).parent / "trajectory_views.sql").read_text()


RUN_STAGES = pa.schema(
    [
        ("run_id", pa.string()),
        ("stage", pa.string()),
        ("teacher", pa.string()),
        ("key", pa.string()),
        ("rows", pa.int64()),
        ("wall_s", pa.float64()),
        ("compute_s", pa.float64()),
        ("cached", pa.bool_()),
        ("rows_computed", pa.int64()),
        ("rows_reused", pa.int64()),
        ("cost_usd", pa.float64()),  # what the output's rows cost, each when it was made (docs/cost.md)
        ("spent_usd", pa.float64()),  # what this run paid for them (a cached output: nothing)
    ]
)  # the same columns for a run without stages (a build that failed early)


def add_view(con, store: StageStore, name: str, outputs: Iterable[tuple[str, str]]) -> None:
    """The view ``name`` over the files of the committed ``(stage, key)`` outputs, columns matched by name (the
    catalog's views, a node's inputs); no view where there is no file."""
    files = [str(p) for stage, key in outputs for p in store.paths(stage, key)]
    if files:
        con.read_parquet(files, union_by_name=True).create_view(name, replace=True)


def _cost(run) -> dict:
    """A run's cost (``bonforge.report.cost``): its build summary's, or what a build its budget stopped spent;
    each figure ``usd`` (a record is read as written, maybe by hand)."""
    cost = _mapping(_mapping(run.build_summary).get("cost")) or {
        "spent_usd": _mapping(_mapping(run.extra).get("budget")).get("spent_usd")}
    return {k: usd(cost.get(k)) for k in ("spent_usd", "rows_usd", "per_kept_row_usd")}


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def usd(value) -> float | None:
    """A dollar figure a record or manifest states: a number >= 0, or None (unknown) for anything else (a string,
    NaN, a negative sum): one bad record never stops the listing of the others."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf")
    return float(value) if ok else None


def _runs_table(runs: list[dict]) -> pa.Table:
    rows = [
        {
            "run_id": r.run_id,
            "recipe": r.recipe_name,
            "status": r.status,
            "started": r.started,
            "finished": r.finished,
            "wall_s": r.wall_s,
            "dataset": r.dataset,
            "stages": json.dumps(r.stages, sort_keys=True),
            "rows_computed": sum(v["computed"] for v in r["rows"].values()) if "rows" in r else None,
            "rows_reused": sum(v["reused"] for v in r["rows"].values()) if "rows" in r else None,
            **{k: _cost(r).get(k) for k in ("spent_usd", "rows_usd", "per_kept_row_usd")},
        }
        for r in runs
    ]
    schema = pa.schema(
        [
            ("run_id", pa.string()),
            ("recipe", pa.string()),
            ("status", pa.string()),
            ("started", pa.string()),
            ("finished", pa.string()),
            ("wall_s", pa.float64()),
            ("dataset", pa.string()),
            ("stages", pa.string()),
            ("rows_computed", pa.int64()),  # by this run, over its stages (samples, verdicts, ...)
            ("rows_reused", pa.int64()),  # taken from earlier outputs (row reuse), not computed
            ("spent_usd", pa.float64()),  # what this run paid (docs/cost.md)
            ("rows_usd", pa.float64()),  # what its outputs' rows cost, each when it was made
            ("per_kept_row_usd", pa.float64()),  # rows_usd over the dataset's rows
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)
