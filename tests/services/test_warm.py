"""`bonforge up` keeps a Prefect server, a Ray head and a warm builder for later builds: `status` shows them,
`run` uses them (it runs in the warm builder, its flow run is on that server, its Ray shards ran on that
head, nothing else was started; a knob change computes only the stages it changes, and only those are
Prefect tasks; a no-op rebuild computes nothing and makes no flow run), `down` stops them. Stale records
(services gone) are reported and ignored."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from bonforge.services import warm

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "gsm8k-genselect.yaml"
LIMIT = "problems.limit=300"  # 300 candidates per teacher: two verification shards each, run on Ray
pytestmark = pytest.mark.slow


def cli(*args: str, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bonforge.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)  # fmt: skip


@pytest.fixture(scope="module")
def services(tmp_path_factory, gsm8k_pool):
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "RAY_ADDRESS")}
    env |= {"BONFORGE_HOME": str(home), "PREFECT_HOME": str(home / "prefect"), "BONFORGE_QUIET": "1"}
    (home / "prefect").mkdir()
    with sqlite3.connect(home / "prefect" / "prefect.db") as db:  # Prefect's default database, as another
        db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")  # version
        db.execute("INSERT INTO alembic_version VALUES ('ffffffffffff')")  # left it: a revision unknown here
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
        assert f"builder  {record['builder']['socket']}" in out
        assert out.count(" up  (log ") == 3
    again = cli("up", env=env)  # idempotent: the same services, nothing started
    assert again.returncode == 0 and json.loads(Path(env["BONFORGE_HOME"], "services.json").read_text()) == record


def test_its_prefect_server_has_a_database_of_its_own(services):
    import prefect

    env, _, _ = services
    prefect_home = Path(env["PREFECT_HOME"])
    with sqlite3.connect(prefect_home / f"bonforge-{prefect.__version__}" / "prefect.db") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() != [("ffffffffffff",)]
    with sqlite3.connect(prefect_home / "prefect.db") as db:  # the shared one: untouched
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [("ffffffffffff",)]


def api(record: dict, path: str, body: dict) -> list[dict]:
    req = urllib.request.Request(f"{record['prefect']['url']}/{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def flow_runs(record: dict) -> list[dict]:
    return api(record, "flow_runs/filter", {"flows": {"name": {"any_": ["bonforge-build"]}}, "sort": "START_TIME_ASC"})


@pytest.fixture(scope="module")
def built(services, tmp_path_factory):
    """A first build with the warm services: (its result, its store)."""
    env, _, _ = services
    store = tmp_path_factory.mktemp("warm") / "store"
    return cli("run", str(RECIPE), "--set", LIMIT, "--store", str(store), env=env), store


def test_run_uses_the_warm_services(services, built):
    env, record, _ = services
    res, store = built
    assert res.returncode == 0, res.stderr[-3000:]
    assert "running in the warm builder of `bonforge up` (pid " in res.stderr
    assert f"using the services of `bonforge up`: Prefect at {record['prefect']['url']} Ray at " \
           f"{record['ray']['address']}" in res.stderr
    # the flow run is recorded by the warm server
    runs = flow_runs(record)
    assert [r["state_type"] for r in runs] == ["COMPLETED"]
    # the verification shards ran on the warm Ray head, the only node
    code = "import ray; ray.init(); print(' '.join(n['NodeID'] for n in ray.nodes() if n['Alive']))"
    nodes = subprocess.run([sys.executable, "-c", code], env={**env, **warm.ray_env(record)}, capture_output=True,
                           text=True, timeout=300, check=True).stdout.split()
    manifests = [json.loads(p.read_text()) for p in (store / "stages" / "verdicts").glob("*/manifest.json")]
    assert len(nodes) == 1 and manifests and all(m["ray_nodes"] == nodes for m in manifests)


def test_a_knob_change_computes_and_tasks_only_what_it_changes(services, built):
    env, record, _ = services
    _, store = built
    before = {p: p.stat().st_mtime_ns for p in store.glob("stages/*/*/manifest.json")}
    res = cli("run", str(RECIPE), "--set", LIMIT, "--set", "filter.max_pass_rate=0.75",
              "--store", str(store), env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "running in the warm builder" in res.stderr
    computed = {line.split()[0] for line in res.stderr.splitlines() if "rows  computed in" in line}
    assert computed == {"problem_stats", "genselect"}
    # nothing committed before was written again
    assert {p: p.stat().st_mtime_ns for p in before} == before
    # the new flow run has one task per computed stage, none for the committed ones
    flow_run = flow_runs(record)[-1]
    tasks = api(record, "task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run["id"]]}}})
    assert flow_run["state_type"] == "COMPLETED" and sorted(t["name"] for t in tasks) == ["genselect", "problem_stats"]
    # the run record still names every stage, the committed ones as cached
    run = json.loads(max(store.glob("runs/*.json"), key=lambda p: p.stat().st_mtime_ns).read_text())
    assert set(run["stages"]) >= {"problems", "candidates", "verdicts", "problem_stats", "genselect"}
    assert set(run["cached"]) == {"problems", "candidates", "verdicts"} and run["status"] == "succeeded"


def test_a_no_op_rebuild_in_the_warm_builder_computes_nothing_and_makes_no_flow_run(services, built):
    env, record, _ = services
    _, store = built
    flows = len(flow_runs(record))
    res = cli("run", str(RECIPE), "--set", LIMIT, "--set", "filter.max_pass_rate=0.75",
              "--store", str(store), env=env)  # fmt: skip
    assert res.returncode == 0 and "running in the warm builder" in res.stderr, res.stderr[-3000:]
    assert "every stage is committed" in res.stderr and "computed in" not in res.stderr
    assert len(flow_runs(record)) == flows
    report = Path(res.stdout.split("report: ")[1].split()[0])
    assert report.is_file() and report.parent.parent.name == "reports"


def test_a_failing_build_in_the_warm_builder_prints_one_error_line(services, built):
    env, _, _ = services
    _, store = built
    res = cli("run", str(RECIPE), "--set", LIMIT, "--set", "filter.min_pass_rate=0.99",
              "--set", "filter.max_pass_rate=1", "--store", str(store), env=env)  # fmt: skip
    assert "running in the warm builder" in res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert res.returncode == 2 and len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]


def test_down_stops_them(services):
    env, record, _ = services
    stopped = cli("down", env=env)
    assert stopped.returncode == 0 and stopped.stdout.split() == ["prefect", "stopped", "ray", "stopped",
                                                                  "builder", "stopped"]
    assert not warm._alive(record["prefect"]["pid"], "prefect") and not warm._alive(record["ray"]["pid"], "ray")
    assert not warm._alive(record["builder"]["pid"], warm.BUILDER) and not Path(record["builder"]["socket"]).exists()
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
    assert warm.check(warm.read()) == {"prefect": False, "ray": False, "builder": False}
    assert warm.current() is None
    from typer.testing import CliRunner

    from bonforge.cli import app

    out = CliRunner().invoke(app, ["status"]).output
    assert out.count("not answering") == 3
