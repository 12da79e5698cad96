"""Scheduled builds on a real Prefect server on loopback: `bonforge deploy` registers a deployment with a cron
schedule, `bonforge serve` executes a run triggered through the API, and the run publishes the dataset."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from procs import kill_group, run, start

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "gsm8k-genselect.yaml"
pytestmark = pytest.mark.slow


def wait_for(check, timeout: float, what: str, log: Path):
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n" + log.read_text()[-3000:]
        time.sleep(0.25)
    return result


@pytest.fixture(scope="module")
def prefect_server(prefect_api, gsm8k_pool):
    """The session's Prefect server on loopback (its own start is what tests/services covers): the
    client env (the runner of `bonforge serve` polls it every second)."""
    return {**os.environ, "PREFECT_API_URL": prefect_api, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}


def api(env: dict, method: str, path: str, **kw) -> dict | list:
    r = httpx.request(method, env["PREFECT_API_URL"] + path, timeout=30, **kw)
    r.raise_for_status()
    return r.json()


def test_deploy_serve_and_run(prefect_server, tmp_path):
    env, store = prefect_server, tmp_path / "store"
    deploy = [
        "-m",
        "bonforge.cli",
        "deploy",
        str(RECIPE),
        "--cron",
        "0 3 * * *",
        "--name",
        "nightly",
        "--set",
        "problems.limit=40",
        "--store",
        str(store),
    ]
    assert run(deploy, env, tmp_path / "deploy.log", timeout=300) == 0, (tmp_path / "deploy.log").read_text()

    dep = api(env, "GET", "/deployments/name/bonforge-scheduled-build/nightly")
    assert [s["schedule"]["cron"] for s in dep["schedules"]] == ["0 3 * * *"]
    assert dep["parameters"] == {
        "recipe": str(RECIPE),
        "store": str(store.resolve()),
        "overrides": ["problems.limit=40"],
    }

    server_log = tmp_path / "serve.log"
    serve = start(["-m", "bonforge.cli", "serve", "--name", "nightly"], env, server_log)
    try:
        flow_run = api(env, "POST", f"/deployments/{dep['id']}/create_flow_run", json={})

        def final_state():
            state = api(env, "GET", f"/flow_runs/{flow_run['id']}")["state"]
            assert serve.poll() is None, server_log.read_text()[-3000:]
            return state if state["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") else None

        state = wait_for(final_state, 600, "the triggered run", server_log)
    finally:
        kill_group(serve, signal.SIGTERM)
    assert state["type"] == "COMPLETED", server_log.read_text()[-3000:]
    assert (store / "datasets" / "gsm8k-genselect" / "v1" / "manifest.json").is_file()
    runs = list((store / "runs").glob("*.json"))
    assert len(runs) == 1


def test_deploy_errors(prefect_server, tmp_path):
    bad_cron = ["-m", "bonforge.cli", "deploy", str(RECIPE), "--cron", "every night", "--store", str(tmp_path)]
    assert run(bad_cron, prefect_server, tmp_path / "cron.log", timeout=120) == 2
    assert "--cron 'every night': not a valid cron expression" in (tmp_path / "cron.log").read_text()
    no_server = {k: v for k, v in prefect_server.items() if k != "PREFECT_API_URL"}
    assert run(bad_cron[:4] + ["--cron", "0 3 * * *"], no_server, tmp_path / "url.log", timeout=120) == 2
    assert "schedules need a Prefect server" in (tmp_path / "url.log").read_text()
    assert run(["-m", "bonforge.cli", "serve", "--name", "nope"], prefect_server, tmp_path / "serve.log") == 2
    assert "no deployment named nope" in (tmp_path / "serve.log").read_text()
