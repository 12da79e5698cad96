"""Back-pressure on Ray: the engine submits at most ``shards.in_flight_bound()`` shards before it waits for
one, and takes the next shard from a streamed stage only then, so the driver holds a bounded number of
shards whatever the size of the build."""

import time

import pyarrow as pa
import pytest

from bonforge.engine import run_node, shards
from bonforge.stage import Stage
from bonforge.storage.store import StageStore

ray = pytest.importorskip("ray")


def test_the_driver_never_holds_more_than_the_bound_of_shards_in_flight(tmp_path, monkeypatch):
    n_shards, bound = 12, 3
    cut, written = [], []  # shards taken from the stream; how many were written at that moment
    store = StageStore(tmp_path)

    def stream(inputs):
        for i in range(n_shards):
            cut.append(i)
            written.append(len(store.done_shards("slow", node.key)))
            yield pa.table({"problem_id": [f"p{i:03d}"] * 4, "candidate_id": [f"p{i:03d}/{j}" for j in range(4)]})

    def compute(t):
        time.sleep(0.2)
        return t

    node = Stage("slow", "1", compute=compute, executor="ray", shard_rows=4, stream=stream).bind({}, {})
    waits = []
    real_wait = ray.wait
    monkeypatch.setattr(ray, "wait", lambda refs, **kw: (waits.append(len(refs)), real_wait(refs, **kw))[1])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert shards.in_flight_bound() == 2 * 2  # IN_FLIGHT_PER_CPU x the cluster's CPUs
        monkeypatch.setattr(shards, "in_flight_bound", lambda: bound)
        man = run_node(store, node)
    finally:
        ray.shutdown()
    assert man["rows"] == 4 * n_shards and len(cut) == n_shards
    assert max(waits) == bound, waits  # never more than the bound submitted and not yet written
    # shard i is read only once all but ``bound`` of the shards before it are done (+1: the first two are
    # taken together, to decide whether Ray is worth it)
    assert all(i - w <= bound + 1 for i, w in zip(cut, written)), list(zip(cut, written))
