"""The temporary Prefect server a build starts: it answers during the build and goes away with the
process that started it, even when that process is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from procs import kill_group

from bonforge.services.prefect_server import healthy

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "gsm8k-genselect.yaml"

SCRIPT = """
import sys, time
from bonforge.config import load_recipe
from bonforge.services import for_build
from prefect.settings import PREFECT_API_URL
with for_build(load_recipe(sys.argv[1])):
    print(PREFECT_API_URL.value(), flush=True)
    if sys.argv[2] == "hold":
        time.sleep(600)
print("stopped", flush=True)
"""


def answers(url: str) -> bool:
    return healthy(url, timeout=2)


def gone(url: str, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not answers(url):
            return True
        time.sleep(0.5)
    return False


@pytest.fixture
def env():
    return {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {"RAY_ADDRESS": ""}


def run(mode: str, env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(RECIPE), mode],
        stdout=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )  # fmt: skip


def test_the_server_stops_with_the_build(env):
    proc = run("exit", env)
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:") and url.endswith("/api")
    assert proc.stdout.readline().strip() == "stopped"
    assert proc.wait(60) == 0
    assert not answers(url)


def test_the_server_dies_with_a_killed_build(env):
    proc = run("hold", env)
    try:
        url = proc.stdout.readline().strip()
        assert answers(url)
        os.kill(proc.pid, signal.SIGKILL)  # the build only: its server is left to notice
        proc.wait(30)
        assert gone(url, within_s=30)
    finally:
        kill_group(proc)


def test_draining_where_an_event_loop_runs_leaves_no_coroutine_unawaited():
    """A notebook's cell runs while an event loop runs: there Prefect's drain hands back a coroutine; ours
    drains in a thread of its own, so nothing is left unawaited (no RuntimeWarning at the end of a build)."""
    import asyncio
    import gc
    import warnings

    from bonforge.services.prefect_server import drain_prefect_clients

    async def cell():
        drain_prefect_clients()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(cell())
        gc.collect()
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []
