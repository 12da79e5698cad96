"""The catalog's `runs` table read from run records as written (by a build, or by hand): a cost figure that is
not a dollar amount is unknown, and never stops the listing of the other runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.storage.catalog import connect
from bonforge.storage.store import StageStore


def record(store: Path, run_id: str, cost, started: str) -> None:
    (store / "runs").mkdir(parents=True, exist_ok=True)
    (store / "runs" / f"{run_id}.json").write_text(json.dumps({
        "run_id": run_id, "recipe_name": "r", "status": "succeeded", "started": started, "stages": {},
        "build_summary": {"cost": cost}, "extra": {}}))


@pytest.mark.parametrize("spent", ["lots", {"a": 1}, True, float("nan"), float("inf"), -5, [1]])
def test_a_run_record_with_a_hostile_cost_lists_it_unknown_beside_the_others(tmp_path, spent):
    """A string or a mapping stopped `bonforge runs` with a traceback (Arrow could not convert it); true read as
    $1, NaN, inf and -5 as spent. The control: the honest record beside it keeps its figures."""
    record(tmp_path, "bad", {"spent_usd": spent, "rows_usd": 2.0, "per_kept_row_usd": 0.5}, "2026-01-01T00:00:00")
    record(tmp_path, "good", {"spent_usd": 1.25, "rows_usd": 2.0, "per_kept_row_usd": 0.5}, "2026-01-02T00:00:00")
    rows = connect(StageStore(tmp_path)).sql("SELECT run_id, spent_usd, rows_usd FROM runs ORDER BY run_id").fetchall()
    assert rows == [("bad", None, 2.0), ("good", 1.25, 2.0)]
    said = CliRunner().invoke(app, ["runs", "--store", str(tmp_path)], env={"COLUMNS": "300"})
    assert said.exit_code == 0 and "good" in said.output and "1.25" in said.output, said.output


def test_a_cost_that_is_not_a_mapping_is_no_cost(tmp_path):
    record(tmp_path, "odd", ["not", "a", "mapping"], "2026-01-01T00:00:00")
    assert connect(StageStore(tmp_path)).sql("SELECT spent_usd FROM runs").fetchall() == [(None,)]
