"""`bonforge runs --run` of a failed run and the SQL errors of `bonforge sql` (parser, binder, and those raised
while rows are fetched) are one `error:` line, exit code 2, never DuckDB's raw message or a traceback."""

from __future__ import annotations

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.storage.store import StageStore
from bonforge.storage.run_record import RunRecord


def commit(store: StageStore, stage: str, key: str) -> None:
    store.write_shard(stage, key, 0, pa.table({"problem_id": ["p"], "question": ["one"]}))
    store.commit(stage, key, 1, version="1", config={}, upstream={})


def test_runs_of_a_failed_run_is_one_error_line(tmp_path):
    store = StageStore(tmp_path / "store")
    store.record_run(RunRecord.from_json({"run_id": "r-bad", "started": "1", "status": "failed", "stages": {},
                      "error": "InputError: problems.jsonl line 3: field 'answer' is missing\nmore detail"}))
    res = CliRunner().invoke(app, ["runs", "--run", "r-bad", "--store", str(store.root)])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == [
        "error: run r-bad failed before it recorded any stage: InputError: problems.jsonl line 3: field 'answer' "
        "is missing"]
    commit(store, "problems", "kp")
    store.record_run(RunRecord.from_json({"run_id": "r-late", "started": "2", "status": "failed",
                                          "stages": {"problems": ["kp"]},
                                          "error": "StageFailed: stage verdicts: the sandbox image is missing"}))
    res = CliRunner().invoke(app, ["runs", "--run", "r-late", "--store", str(store.root)])
    assert res.exit_code == 2 and "kp" in res.output
    assert res.output.strip().splitlines()[-1] == "error: run r-late failed: StageFailed: stage verdicts: the " \
                                                  "sandbox image is missing"
    res = CliRunner().invoke(app, ["runs", "--run", "nope", "--store", str(tmp_path / "empty")])
    assert res.exit_code == 2 and res.output.startswith("error: no runs recorded")


@pytest.mark.parametrize("query, line", [
    ("SELECT CAST(question AS INTEGER) AS n FROM problems",  # fails while rows are fetched
     "error: Conversion Error: Could not convert string 'one' to INT32 when casting from source column question"),
    ("SELECT nope FROM problems", 'error: Binder Error: Referenced column "nope" not found in FROM clause! '
                                  'Candidate bindings: "problem_id"'),
    ("SELEC 1", 'error: Parser Error: syntax error at or near "SELEC"'),
    ("SELECT [1, 2] AS l", "error: --format csv: Unsupported Type:list<l: int32> (use --format json or parquet)"),
])
def test_sql_errors_are_one_line(tmp_path, query, line):
    store = StageStore(tmp_path / "store")
    commit(store, "problems", "kp")
    store.record_run(RunRecord.from_json({"run_id": "r", "started": "1", "status": "succeeded",
                                          "stages": {"problems": ["kp"]}}))
    res = CliRunner().invoke(app, ["sql", query, "--store", str(store.root), "--format", "csv"])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == [line]
