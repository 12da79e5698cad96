"""`bonforge up` keeps a Prefect server and a Ray head warm for later builds: `status` shows them, `run`
uses them (its flow run is on that server, its Ray shards ran on that head, nothing else was started),
`down` stops them. Stale records (services gone) are reported and ignored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from bonforge.engine import warm

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "gsm8k-genselect.yaml"
pytestmark = pytest.mark.slow


def cli(*args: str, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bonforge.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)  # fmt: skip


@pytest.fixture(scope="module")
def services(tmp_path_factory, gsm8k_pool):
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "RAY_ADDRESS")}
    env |= {"BONFORGE_HOME": str(home), "PREFECT_HOME": str(home / "prefect"), "BONFORGE_QUIET": "1"}
    started = cli("up", "--num-cpus", "2", env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    record = json.loads((home / "services.json").read_text())
    try:
        yield env, record, started.stdout
    finally:
        cli("down", env=env)


def test_status_shows_both_services(services):
    env, record, up_output = services
    status = cli("status", env=env)
    assert status.returncode == 0
    for out in (up_output, status.stdout):
        assert f"prefect  {record['prefect']['url']}" in out and f"ray      {record['ray']['address']}" in out
        assert out.count(" up  (log ") == 2
    again = cli("up", env=env)  # idempotent: the same services, nothing started
    assert again.returncode == 0 and json.loads(Path(env["BONFORGE_HOME"], "services.json").read_text()) == record


def test_run_uses_the_warm_services(services, tmp_path):
    env, record, _ = services
    res = cli("run", str(RECIPE), "--set", "problems.limit=600", "--store", str(tmp_path / "store"), env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"using the services of `bonforge up`: Prefect at {record['prefect']['url']} Ray at " \
           f"{record['ray']['address']}" in res.stderr
    # the flow run is recorded by the warm server
    body = json.dumps({"flows": {"name": {"any_": ["bonforge-build"]}}}).encode()
    req = urllib.request.Request(f"{record['prefect']['url']}/flow_runs/filter", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        runs = json.loads(r.read())
    assert [r["state_type"] for r in runs] == ["COMPLETED"]
    # the verification shards ran on the warm Ray head, the only node
    code = "import ray; ray.init(); print(' '.join(n['NodeID'] for n in ray.nodes() if n['Alive']))"
    nodes = subprocess.run([sys.executable, "-c", code], env={**env, **warm.ray_env(record)}, capture_output=True,
                           text=True, timeout=300, check=True).stdout.split()
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "store" / "stages" / "verdicts").glob("*/manifest.json")]
    assert len(nodes) == 1 and manifests and all(m["ray_nodes"] == nodes for m in manifests)


def test_down_stops_them(services):
    env, record, _ = services
    stopped = cli("down", env=env)
    assert stopped.returncode == 0 and stopped.stdout.split() == ["prefect", "stopped", "ray", "stopped"]
    assert not warm._alive(record["prefect"]["pid"], "prefect") and not warm._alive(record["ray"]["pid"], "ray")
    assert not Path(env["BONFORGE_HOME"], "services.json").exists()
    assert "no services recorded" in cli("status", env=env).stdout
    assert cli("down", env=env).stdout.strip() == "no services recorded: nothing to stop"


def test_a_stale_record_is_reported_and_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("BONFORGE_HOME", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    (tmp_path / "services.json").write_text(json.dumps({
        "prefect": {"url": "http://127.0.0.1:9/api", "pid": pid, "log": "p.log"},
        "ray": {"address": "127.0.0.1:9", "pid": pid, "log": "r.log", "temp_dir": str(tmp_path / "r"),
                "token_path": "t"},
    }))  # fmt: skip
    assert warm.check(warm.read()) == {"prefect": False, "ray": False} and warm.current() is None
    from typer.testing import CliRunner

    from bonforge.cli import app

    out = CliRunner().invoke(app, ["status"]).output
    assert out.count("not answering") == 2
