"""A build on a real two-node Ray cluster (head + worker on this machine, token authentication on): the
same recipe as on local Ray, only RAY_ADDRESS set, and the verification shards ran on both nodes. The build
uses the session's Prefect server as a configured one (its own start is what tests/services covers).

The cluster lives in its own temp dir and process groups and is torn down by killing those groups:
``ray stop`` would also stop every other Ray instance on a shared machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from procs import free_port, kill_group, run, start, wait_for_ray_nodes

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "gsm8k-genselect.yaml"
pytestmark = pytest.mark.slow


def _ray(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    return start(["-m", "ray.scripts.scripts", "start", "--block", *args], env, log)


@pytest.fixture(scope="module")
def cluster(gsm8k_pool):
    """A head and a worker node with one CPU each; yields the environment a driver needs."""
    tmp = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))  # short: Ray's unix socket paths are length-limited
    token = tmp / "auth_token"
    token.write_text(uuid.uuid4().hex)
    port = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    common = ["--num-cpus", "1", "--temp-dir", str(tmp / "ray"), "--disable-usage-stats"]
    procs = [
        _ray(
            ["--head", "--node-ip-address", "127.0.0.1", "--port", str(port), "--include-dashboard", "false", *common],
            env,
            tmp / "head.log",
        )
    ]
    env["RAY_ADDRESS"] = f"127.0.0.1:{port}"
    try:
        assert wait_for_ray_nodes(env, 1, procs[0], tmp / "head.log"), (tmp / "head.log").read_text()[-3000:]
        worker = ["--address", env["RAY_ADDRESS"], "--node-ip-address", "127.0.0.1", *common]
        for _ in range(2):  # on a loaded machine the worker's raylet may miss its 30 s to register: once more
            procs.append(_ray(worker, env, tmp / "worker.log"))
            if wait_for_ray_nodes(env, 2, procs[-1], tmp / "worker.log"):
                break
        else:
            pytest.fail((tmp / "worker.log").read_text()[-3000:])
        yield env
    finally:
        for p in reversed(procs):
            kill_group(p, signal.SIGTERM)


def test_driver_without_the_token_is_refused(cluster, tmp_path):
    wrong = tmp_path / "wrong_token"
    wrong.write_text(uuid.uuid4().hex)
    # refused on each try: the driver gives up after 2 tries to reach the cluster (Ray's default: 20, 1 s apart)
    env = {**cluster, "RAY_AUTH_TOKEN_PATH": str(wrong), "RAY_NUM_REDIS_GET_RETRIES": "2"}
    code = "import ray; ray.init(); print('connected')"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "connected" not in out.stdout
    assert "auth" in out.stderr.lower() or "token" in out.stderr.lower(), out.stderr[-2000:]


def test_build_runs_unchanged_on_the_cluster_and_uses_both_nodes(cluster, tmp_path, prefect_api):
    store, log = tmp_path / "store", tmp_path / "run.log"
    args = ["-m", "bonforge.cli", "run", str(RECIPE), "--store", str(store), "--set", "problems.limit=600"]
    assert run(args, {**cluster, "PREFECT_API_URL": prefect_api}, log) == 0, log.read_text()[-4000:]
    nodes = set()
    verdicts = list((store / "stages" / "verdicts").iterdir())
    assert len(verdicts) == 4
    for stage in verdicts:
        man = json.loads((stage / "manifest.json").read_text())
        assert len(list(stage.glob("part-*.parquet"))) == 3 and man["rows"] == 600
        assert sum(man["shards_per_node"].values()) == 3 and sorted(man["shards_per_node"]) == man["ray_nodes"]
        nodes |= set(man["ray_nodes"])
    assert len(nodes) == 2, nodes
    assert "dataset gsm8k-genselect v1" in log.read_text()


def test_a_local_start_says_nothing_about_token_authentication(tmp_path):
    """Ray's banner about its token-authentication default is not printed on every build: the mode is set
    explicitly (token, Ray's default for a local cluster), and the cluster still requires the token."""
    code = ("import os\nfrom bonforge.runtime.cluster import ensure_ray\nensure_ray(num_cpus=1)\nimport ray\n"
            "print('mode', os.environ['RAY_AUTH_MODE'], ray.is_initialized())\nray.shutdown()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    out = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(REPO)}, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "mode token True" in out.stdout and "Token authentication" not in out.stderr, out.stderr[-3000:]


START_HERE = """
import signal, sys, threading
from bonforge.runtime.cluster import ensure_ray
def mine(signum, frame): print('mine', flush=True)
signal.signal(signal.SIGTERM, mine)
if sys.argv[1] == 'thread':
    t = threading.Thread(target=ensure_ray, kwargs={'num_cpus': 1}); t.start(); t.join()
else:
    ensure_ray(num_cpus=1)
print('kept', signal.getsignal(signal.SIGTERM) is mine, flush=True)
import ray; ray.shutdown()
"""


@pytest.mark.parametrize("where", ["main", "thread"])
def test_a_local_start_leaves_sigterm_to_the_process_and_says_nothing_of_it(where):
    """Ray's driver sets a SIGTERM handler of its own (it exits at once, wherever the build is) when started in
    the main thread, and warns that it set none when started on another (a stage of a streaming build): the
    build's own handler stays (``runtime.interrupt``: it stops the build cleanly) and nothing is said."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run([sys.executable, "-c", START_HERE, where], env={**env, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["kept", "True"]
    assert "SIGTERM" not in out.stderr, out.stderr[-3000:]


OUTLIVES = """
import threading, time
from bonforge.runtime.cluster import ensure_ray
t = threading.Thread(target=ensure_ray, kwargs={'num_cpus': 1}); t.start(); t.join()  # the stage's thread ends
time.sleep(3)
import ray
print('answer', ray.get(ray.remote(lambda: 42).remote(), timeout=120), flush=True)
ray.shutdown()
"""


def test_a_cluster_a_thread_starts_outlives_the_thread():
    """A streaming build's stage thread may be the one that starts the local cluster; the cluster's processes
    die with the thread that started them (the parent-death signal follows the thread): they are started from
    a thread that lasts as long as the process, so the build goes on after the stage ends (before: ``Failed to
    connect to GCS`` and the build's process gone with exit 1, a minute later)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run([sys.executable, "-c", OUTLIVES], env={**env, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["answer", "42"], out.stderr[-3000:]
