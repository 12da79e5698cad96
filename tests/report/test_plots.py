"""The report's per-teacher accuracy says which problems it is over: every problem, or with early stopping the
problems drawn in full (a problem stopped early holds only its first samples, mostly right)."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from bonforge.report import plots


def catalog() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    verdicts = pa.table({"problem_id": ["easy", "easy", "mixed", "mixed", "mixed", "mixed"],
                         "teacher": ["a"] * 6, "correct": [True, True, True, False, False, False]})
    stats = pa.table({"problem_id": ["easy", "mixed"], "teacher": ["*", "*"], "stopped_early": [True, False]})
    con.register("v", verdicts)
    con.register("s", stats)
    con.sql("CREATE VIEW verdicts AS SELECT * FROM v")
    con.sql("CREATE VIEW problem_stats AS SELECT * FROM s")
    return con


def test_accuracy_leaves_the_problems_stopped_early_out():
    plot = plots.teacher_accuracy(catalog(), {"recipe": {"filter": {"early_stop": True}}})
    assert plot.rows == [("a", 0.25, 4)] and "stopped early left out" in plot.title


def test_without_early_stop_it_is_over_every_problem():
    plot = plots.teacher_accuracy(catalog(), {"recipe": {"filter": {}}})
    assert plot.rows == [("a", 0.5, 6)] and "every problem" in plot.title
