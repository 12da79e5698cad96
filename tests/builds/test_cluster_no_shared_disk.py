"""A two-node Ray cluster whose nodes share no disk: head, worker and driver each run in a folder of their
own (their own Ray temp dir and token file copy), and the store is an S3 prefix on a real S3 server
(SeaweedFS). A GSM8K build uses both nodes; the worker node is killed (SIGKILL to its whole process group)
while a verification stage is half written; the build still finishes (Ray retries the lost shards on the
head, or a rerun resumes) and publishes a dataset byte-identical to an undisturbed build's into a local
store. No stage file lands in any node's folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from procs import free_port, kill_group, run, start, wait_for_ray_nodes

from bonforge.storage.store import StageStore

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "gsm8k-genselect.yaml"
LIMIT = ["--set", "problems.limit=150"]
pytestmark = pytest.mark.slow

# Smaller, slower verification shards: a stage is half written long enough for the kill to land in it.
# ``slow_verify`` is defined here (in __main__), so Ray ships it to the nodes by value.
DRIVER = """
import sys, time
from dataclasses import replace
from bonforge.stages import verify


def slow_verify(*args, math=verify.MATH.compute, **kwargs):
    time.sleep(0.4)
    return math(*args, **kwargs)  # the stage's own compute (it takes the rows still to judge, ``todo``)


verify.MATH = replace(verify.MATH, shard_rows=32, compute=slow_verify)
from bonforge.cli import app

app(sys.argv[1:])
"""


class Node:
    """A Ray node in a folder of its own: its working directory, Ray temp dir and token file."""

    def __init__(self, root: Path, name: str, token: str, base_env: dict):
        self.dir = root / name
        self.dir.mkdir()
        (self.dir / "auth_token").write_text(token)
        self.env = {**base_env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.dir / "auth_token")}
        self.proc: subprocess.Popen | None = None

    def start(self, *args: str) -> None:
        common = ["--num-cpus", "1", "--temp-dir", str(self.dir / "ray"), "--disable-usage-stats"]
        argv = ["-m", "ray.scripts.scripts", "start", "--block", "--node-ip-address", "127.0.0.1", *args, *common]
        self.proc = start(argv, self.env, self.dir / "ray.log", cwd=self.dir)

    def kill(self) -> None:
        if self.proc is not None:
            kill_group(self.proc)


@pytest.fixture(scope="module")
def cluster(seaweedfs, gsm8k_pool, prefect_api):
    root = Path(tempfile.mkdtemp(prefix="nsd", dir="/tmp"))  # short: Ray's unix socket paths are length-limited
    token = uuid.uuid4().hex
    # Every process gets the S3 settings, this checkout's bonforge and the session's Prefect server (as a
    # configured one: a build's own start of it is what tests/services covers), and nothing else in common.
    base = {**os.environ, **seaweedfs.env, "PYTHONPATH": str(REPO), "PREFECT_API_URL": prefect_api}
    base.pop("RAY_ADDRESS", None)
    head, worker, driver = (Node(root, name, token, base) for name in ("head", "worker", "driver"))
    port = free_port()
    # the head's GCS finds the killed worker dead after 3 failed health checks 1 s apart (Ray's default: 5, 3 s
    # apart): the lost shards are retried sooner
    head.env.update(RAY_health_check_period_ms="1000", RAY_health_check_failure_threshold="3")
    head.start("--head", "--port", str(port), "--include-dashboard", "false")
    address = f"127.0.0.1:{port}"
    for n in (worker, driver):
        n.env["RAY_ADDRESS"] = address
    try:
        head_log = head.dir / "ray.log"
        assert wait_for_ray_nodes(driver.env, 1, head.proc, head_log), head_log.read_text()[-3000:]
        for _ in range(2):  # on a loaded machine the worker's raylet may miss its 30 s to register: once more
            worker.start("--address", address)
            if wait_for_ray_nodes(driver.env, 2, worker.proc, worker.dir / "ray.log"):
                break
        else:
            pytest.fail((worker.dir / "ray.log").read_text()[-3000:])
        yield root, head, worker, driver
    finally:
        worker.kill()
        head.kill()
        shutil.rmtree(root, ignore_errors=True)


def _half_written(store: StageStore, stage: str) -> bool:
    """Some stage ``stage`` has shards but no manifest, and those of it committed ran on both nodes between them
    (a streaming build verifies its teachers at once: one stage's shards may all have gone to one node)."""
    loc = store.loc
    keys = loc.names(loc.path("stages", stage))
    committed = [store.manifest(stage, k) for k in keys if store.exists(stage, k)]
    partial = [k for k in keys if not store.exists(stage, k) and store.done_shards(stage, k)]
    return bool(partial) and len({n for m in committed for n in m["ray_nodes"]}) == 2


def _nodes(store: StageStore, stage: str) -> list:
    """Per committed output of ``stage``: its shards per Ray node, and when it computed."""
    loc = store.loc
    return [(m["shards_per_node"], m["timings"]["busy"]) for m in
            (store.manifest(stage, k) for k in loc.names(loc.path("stages", stage)) if store.exists(stage, k))]


def _dataset(store: StageStore) -> dict:
    run = store.run()
    assert run["status"] == "succeeded"
    return json.loads(store.loc.read_bytes(f"{run['dataset']}/manifest.json"))


def test_a_build_on_nodes_without_a_shared_disk_survives_losing_a_node(cluster, seaweedfs, s3_env, tmp_path):
    root, head, worker, driver = cluster
    local, t0 = tmp_path / "local", time.monotonic()  # the undisturbed build, into a local store (on the cluster)
    ref_log = tmp_path / "reference.log"
    ref_args = ["-m", "bonforge.cli", "run", str(RECIPE), "--store", str(local), *LIMIT]
    assert run(ref_args, driver.env, ref_log, cwd=tmp_path) == 0, ref_log.read_text()[-3000:]
    reference = _dataset(StageStore(local))
    t1 = time.monotonic()
    url = seaweedfs.url()
    script = driver.dir / "slow_bonforge.py"
    script.write_text(DRIVER)
    args = [str(script), "run", str(RECIPE), "--store", url, *LIMIT]
    store = StageStore(url)
    proc = start(args, driver.env, tmp_path / "cluster.log", cwd=driver.dir)
    try:
        deadline = time.monotonic() + 300
        while not _half_written(store, "verdicts"):
            assert proc.poll() is None, (f"ended before the kill ({_nodes(store, 'verdicts')}):\n"
                                         + (tmp_path / "cluster.log").read_text()[-3000:])
            assert time.monotonic() < deadline, (tmp_path / "cluster.log").read_text()[-3000:]
            time.sleep(0.05)
        worker.kill()
        rc = proc.wait(300)
    finally:
        kill_group(proc)
    log = (tmp_path / "cluster.log").read_text()
    if rc != 0:  # Ray did not carry the build through: a rerun on the head alone resumes it
        rerun = tmp_path / "rerun.log"
        assert run(args, driver.env, rerun, cwd=driver.dir) == 0, rerun.read_text()[-3000:]
    assert _dataset(store)["files"] == reference["files"], log[-3000:]  # every file's sha256 and rows

    per_node = Counter()  # Ray node id -> verification shards it computed, over the four verdicts stages
    for key in store.loc.names(store.loc.path("stages", "verdicts")):
        per_node.update(store.manifest("verdicts", key)["shards_per_node"])
    print("verification shards per node:", ", ".join(f"{n[:12]} {c}" for n, c in sorted(per_node.items())))
    assert len(per_node) == 2 and min(per_node.values()) > 0  # work landed on both nodes
    stray = [p for p in root.rglob("*") if p.suffix == ".parquet" or p.name in ("bonforge-store", "s3:")]
    assert stray == []  # nothing was written to a local path on any node
    how = "finished by itself" if rc == 0 else "was resumed by a rerun"
    print(f"reference build {t1 - t0:.0f} s; the cluster build {how} after the kill: {time.monotonic() - t1:.0f} s")
