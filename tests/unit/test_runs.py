"""Run records as `bonforge runs`, the catalog and `bonforge gc` read them: a build whose process is gone
(killed; a pid reused by another process does not count as alive) shows as failed and gc treats it as
ended; a failed run and a SQL error raised while rows are fetched are one `error:` line, exit code 2."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.storage import liveness
from bonforge.storage.gc import collect
from bonforge.storage.store import StageStore

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "gsm8k-genselect.yaml"

# A build as the engine runs one (execute, recording its start), whose DAG hangs until the test kills it.
BUILD = """
import sys, time
from bonforge.config import load_recipe
from bonforge.engine.run import CommittedRun, execute
from bonforge.storage.store import StageStore

run = CommittedRun(StageStore(sys.argv[1]), load_recipe(sys.argv[2]))
run.record["candidates"] = [sys.argv[4]]  # a stage it has used so far

def dag(recipe, run, recipe_dir):
    print("running", flush=True)
    time.sleep(600)

execute(dag, run, ".", sys.argv[3], record_start=True)
"""


def commit(store: StageStore, stage: str, key: str) -> None:
    store.write_shard(stage, key, 0, pa.table({"problem_id": ["p"], "question": ["one"]}))
    store.commit(stage, key, 1, version="1", config={}, upstream={})


def start_build(store: StageStore, run_id: str, key: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", BUILD, str(store.root), str(RECIPE), run_id, key],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.readline().strip() == "running"
    return proc


def status(store: StageStore, run_id: str) -> str:
    return store.run(run_id)["status"]


def test_a_killed_build_is_failed_and_gc_treats_it_as_ended(tmp_path):
    store = StageStore(tmp_path / "store")
    commit(store, "candidates", "k-killed")
    commit(store, "candidates", "k-live")
    killed = start_build(store, "r1-killed", "k-killed")
    live = start_build(store, "r2-live", "k-live")
    try:
        assert status(store, "r1-killed") == status(store, "r2-live") == "running"
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        record = store.run("r1-killed")
        assert record["status"] == "failed" and f"pid {killed.pid} on {socket.gethostname()}" in record["error"]
        assert status(store, "r2-live") == "running"
        listed = CliRunner().invoke(app, ["runs", "--store", str(store.root)])
        assert listed.exit_code == 0
        rows = [[cell.strip() for cell in line.split("│")] for line in listed.output.splitlines() if "-live" in line
                or "-killed" in line]  # the table: run_id, recipe, status, ...
        assert [(r[1], r[3]) for r in rows] == [("r1-killed", "failed"), ("r2-live", "running")]
        out = collect(store, keep_runs=0)
        assert [o["key"] for o in out["outputs"]] == ["k-killed"] and out["runs"] == ["r1-killed"]
        assert store.exists("candidates", "k-live") and not store.exists("candidates", "k-killed")
    finally:
        live.kill()
        live.wait()
    assert status(store, "r2-live") == "failed"


def test_a_reused_pid_another_host_and_a_reboot():
    me = liveness.stamp()
    assert not liveness.gone(me)
    assert liveness.gone({**me, "start": me["start"] + 1})  # this pid, but another process (reused)
    assert liveness.gone({**me, "boot": "another-boot"})  # the machine restarted since
    assert not liveness.gone({**me, "host": "another-host", "pid": 999_999_999})  # cannot tell: still running
    record = {"run_id": "r", "status": "running", "process": {**me, "start": me["start"] + 1}}
    assert liveness.settle(record)["status"] == "failed" and record["status"] == "running"
    assert liveness.settle({"run_id": "r", "status": "running"})["status"] == "running"  # no process recorded


def test_runs_of_a_failed_run_is_one_error_line(tmp_path):
    store = StageStore(tmp_path / "store")
    store.record_run({"run_id": "r-bad", "started": "1", "status": "failed", "stages": {},
                      "error": "InputError: problems.jsonl line 3: field 'answer' is missing\nmore detail"})
    res = CliRunner().invoke(app, ["runs", "--run", "r-bad", "--store", str(store.root)])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == [
        "error: run r-bad failed before it recorded any stage: InputError: problems.jsonl line 3: field 'answer' "
        "is missing"]
    commit(store, "problems", "kp")
    store.record_run({"run_id": "r-late", "started": "2", "status": "failed", "stages": {"problems": ["kp"]},
                      "error": "StageFailed: stage verdicts: the sandbox image is missing"})
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
])
def test_sql_errors_are_one_line(tmp_path, query, line):
    store = StageStore(tmp_path / "store")
    commit(store, "problems", "kp")
    store.record_run({"run_id": "r", "started": "1", "status": "succeeded", "stages": {"problems": ["kp"]}})
    res = CliRunner().invoke(app, ["sql", query, "--store", str(store.root)])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == [line]
