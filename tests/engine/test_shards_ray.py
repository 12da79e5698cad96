"""Where a Ray stage's shards run: a lone shard in process while Ray is down, on a Ray worker (whose warm
state, such as math-verify checkers, outlives the task) once this process has joined Ray; several shards start
a local Ray without its token banner."""

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from bonforge.engine import run_node
from bonforge.stage import Stage
from bonforge.storage.store import StageStore

ray = pytest.importorskip("ray")
REPO = Path(__file__).resolve().parents[2]


def _pid_stage(name: str):
    table = pa.table({"problem_id": ["p1", "p2"], "candidate_id": ["c1", "c2"]})
    compute = lambda t: t.append_column("pid", pa.array([os.getpid()] * t.num_rows))  # noqa: E731
    return Stage(name, "1", compute=compute, executor="ray", shard_rows=256, table=lambda i: table).bind({}, {})


def test_a_lone_shard_goes_to_ray_only_when_ray_is_up(tmp_path):
    store = StageStore(tmp_path)
    assert not ray.is_initialized()
    local = run_node(store, _pid_stage("down"))
    assert set(store.read("down", local["key"]).column("pid").to_pylist()) == {os.getpid()}
    assert local["ray_nodes"] == []
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        remote = run_node(store, _pid_stage("up"))
        assert os.getpid() not in store.read("up", remote["key"]).column("pid").to_pylist()
        assert remote["ray_nodes"] == [ray.get_runtime_context().get_node_id()]
    finally:
        ray.shutdown()


def test_a_build_that_starts_ray_prints_no_token_banner(tmp_path):
    """A stage of several shards starts a local Ray from the shard loop: Ray's notice about its
    token-authentication default never reaches the build's stderr (the mode is set before Ray is imported), and
    the shards still run on Ray."""
    code = ("import os, sys, pyarrow as pa\n"
            "from bonforge.engine import run_node\nfrom bonforge.stage import Stage\n"
            "from bonforge.storage.store import StageStore\n"
            "t = pa.table({'problem_id': ['p1', 'p2', 'p3'], 'candidate_id': ['c1', 'c2', 'c3']})\n"
            "f = lambda t: t.append_column('pid', pa.array([os.getpid()] * t.num_rows))\n"
            "node = Stage('s', '1', compute=f, executor='ray', shard_rows=1, table=lambda i: t).bind({}, {})\n"
            "store = StageStore(sys.argv[1])\nout = run_node(store, node)\n"
            "print('on ray', os.getpid() not in store.read('s', out['key']).column('pid').to_pylist())\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env={**env, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "on ray True" in done.stdout
    assert "Token authentication" not in done.stderr and "RAY_AUTH_MODE" not in done.stderr, done.stderr[-3000:]


STREAMED = """
import os, sys, time, pyarrow as pa
from types import SimpleNamespace
from bonforge.engine.run import StreamingRun
from bonforge.stage import Stage
from bonforge.storage.store import StageStore
rows = int(sys.argv[2])

def slow(shard):
    time.sleep(0.2)
    return shard

def read(i):
    with i.aligned({"first": ["problem_id", "x"]}) as chunks:
        yield from (c["first"] for c in chunks)

first = Stage("first", "1", compute=slow, shard_rows=1,
              table=lambda i: pa.table({"problem_id": [f"p{k}" for k in range(rows)], "x": list(range(rows))}))
pid = lambda t: t.append_column("pid", pa.array([os.getpid()] * t.num_rows))
then = Stage("then", "1", compute=pid, stream=read, stream_of="first", shard_rows=1, executor="ray")
store = StageStore(sys.argv[1])
run = StreamingRun(store, SimpleNamespace(reuse=True))
out = run.wait(run(then.bind({}, {"first": run(first.bind({}, {}))})))
here = [p == os.getpid() for p in store.read("then", out.key).sort_by("problem_id").column("pid").to_pylist()]
ray = sys.modules.get("ray")
print(*here, ray is not None and ray.is_initialized())
"""


@pytest.mark.parametrize("rows", [1, 3])
def test_a_stage_reading_its_input_as_written_goes_to_ray_only_for_a_second_shard(tmp_path, rows):
    """A streaming build: a Ray stage whose input is still being written cannot know yet whether it will have
    several shards. Its first shard is computed here at once; those that come after it, on Ray: a small build
    starts no Ray (it started Ray for every such stage), a larger one uses it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run([sys.executable, "-c", STREAMED, str(tmp_path), str(rows)], capture_output=True,
                          text=True, timeout=300, env={**env, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    here = ["True"] + ["False"] * (rows - 1)  # computed in this process, per shard
    assert done.stdout.split() == [*here, str(rows > 1)], done.stderr[-3000:]
