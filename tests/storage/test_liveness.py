"""Run records as `bonforge runs`, the catalog and `bonforge gc` read them: a build whose process is gone
(killed; a pid reused by another process does not count as alive) shows as failed and gc treats it as
ended."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
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
