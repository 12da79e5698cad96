"""Where a Ray stage's shards run: a lone shard in process while Ray is down, on a Ray worker (whose warm
state, such as math-verify checkers, outlives the task) once this process has joined Ray."""

import os

import pyarrow as pa
import pytest

from bonforge.engine import run_node
from bonforge.stage import Stage
from bonforge.storage.store import StageStore

ray = pytest.importorskip("ray")


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
