"""Several Ray workers on one node share one sandbox pool (a named actor per node)."""

from __future__ import annotations

import pytest

from bonforge.sandbox.config import CodeVerifyConfig

ray = pytest.importorskip("ray")


@pytest.mark.slow
def test_workers_on_a_node_share_one_pool():
    from bonforge.sandbox.ray_pool import node_pool, shutdown_node_pools

    cfg = CodeVerifyConfig(backend="process", pool_size=1, time_limit_s=1.0)
    request = {
        "id": "r", "kind": "stdio", "program": "print(int(input()) * 2)\n", "prelude": "", "fn_name": None,
        "tests": [{"input": "21\n"}], "time_limit": 1.0, "wall_limit": 3.0, "memory_mb": 256,
        "output_limit": 1024, "stop_on_failure": False,
    }  # fmt: skip

    @ray.remote(num_cpus=0)
    def task(_):
        import os

        [outcome] = node_pool(cfg).run([request])
        return os.getpid(), outcome["results"][0]["stdout"]

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        results = ray.get([task.remote(i) for i in range(6)])
        assert {out for _, out in results} == {"42\n"}
        listed = ray.util.list_named_actors(all_namespaces=True)
        names = [a["name"] for a in listed if a["name"].startswith("bonforge-sandbox-")]
        assert len(names) == 1, listed
        assert shutdown_node_pools() == 1
    finally:
        ray.shutdown()
