"""How the pool spreads requests over its workers: no request waits behind another while a worker is free."""

from __future__ import annotations

import json
import time

import pytest

from bonforge.judging.code import build_request
from bonforge.judging.spec import parse_spec

ONE = parse_spec(json.dumps({"kind": "stdio", "tests": [{"input": "", "output": "ok\n"}]}), "p")


def requests(pool, programs: list[str]) -> list[dict]:
    return [build_request(ONE, p, pool.cfg, f"r{i}") for i, p in enumerate(programs)]


def test_two_long_programs_on_two_slots_run_side_by_side(docker_pool):
    # two 1.5 s sleeps (wall limit 3 s): one after the other on one worker would end at 3 s
    sleeps = [f"import time\ntime.sleep(1.5)\nprint('ok')  # {i}\n" for i in range(2)]
    outcomes = docker_pool.run(requests(docker_pool, sleeps))
    latencies = sorted(o["latency_s"] for o in outcomes)
    assert [o["results"][0]["status"] for o in outcomes] == ["ok", "ok"]
    assert latencies[1] < 2.5, latencies


def test_four_loops_on_two_slots_take_two_rounds(docker_pool):
    # four programs that block until the wall limit (3 s): two rounds on two slots, ~6 s (one after the other: 12 s)
    loops = [f"import time\nwhile True:\n    time.sleep(1)  # {i}\n" for i in range(4)]
    start = time.monotonic()
    outcomes = docker_pool.run(requests(docker_pool, loops))
    took = time.monotonic() - start
    assert {o["results"][0]["status"] for o in outcomes} == {"timeout"}
    assert took < 2 * docker_pool.cfg.wall_limit_s + 1.5, (took, sorted(o["latency_s"] for o in outcomes))


def test_short_programs_still_pipeline(docker_pool):
    # many short requests: each worker keeps two in flight while the queue is long (the next is already in the
    # runner when one finishes); the run's outcomes come back in order, every one judged
    prints = [f"print('ok')  # {i}\n" for i in range(40)]
    outcomes = docker_pool.run(requests(docker_pool, prints))
    assert [o["id"] for o in outcomes] == [f"r{i}" for i in range(40)]
    assert {o["results"][0]["status"] for o in outcomes} == {"ok"}


def test_outcomes_are_handed_over_as_they_arrive(docker_pool):
    seen = []

    def keep(i, outcome):
        seen.append((i, time.monotonic()))
        return {"kept": i, "status": outcome["results"][0]["status"]}

    progs = ["import time\ntime.sleep(1.2)\nprint('ok')\n", "print('ok')\n", "print('ok')  # 2\n"]
    start = time.monotonic()
    out = docker_pool.run(requests(docker_pool, progs), on_outcome=keep)
    assert out == [{"kept": i, "status": "ok"} for i in range(3)]
    first = dict(seen)
    assert first[1] - start < 1.0 and first[2] - start < 1.0  # the short ones did not wait for the long one


def test_a_bad_time_limit_in_one_request_never_raises(docker_pool):
    good = requests(docker_pool, ["print('ok')\n"])[0]
    bad = [dict(good, id=f"bad{k}", wall_limit=v, budget=v) for k, v in
           enumerate([float("nan"), float("inf"), 1e308, -1.0])]  # fmt: skip
    outcomes = docker_pool.run([good, *bad])
    assert outcomes[0]["results"][0]["status"] == "ok"
    assert len(outcomes) == 5 and all(("results" in o) or ("sandbox_error" in o) or ("runner_killed" in o)
                                      for o in outcomes)  # fmt: skip


def test_the_ray_client_hands_outcomes_over_piece_by_piece():
    ray = pytest.importorskip("ray")
    from bonforge.sandbox.config import CodeVerifyConfig
    from bonforge.sandbox.ray_pool import node_pool, shutdown_node_pools

    cfg = CodeVerifyConfig(backend="process", pool_size=2, time_limit_s=1.0)
    reqs = [build_request(ONE, f"print('ok')  # {i}\n", cfg, f"r{i}") for i in range(40)]  # three pieces

    @ray.remote(num_cpus=0)
    def task():
        return node_pool(cfg).run(reqs, on_outcome=lambda i, o: (i, o["id"], o["results"][0]["stdout"]))

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert ray.get(task.remote()) == [(i, f"r{i}", "ok\n") for i in range(40)]
        shutdown_node_pools()
    finally:
        ray.shutdown()


@pytest.mark.parametrize("backend", ["process", pytest.param("docker", marks=pytest.mark.docker)])
def test_large_requests_with_large_answers_never_block_the_channel(backend, request):
    """Megabyte inputs echoed back (Library Checker's tests are this size), more requests than workers: a
    large request is not sent ahead while its worker runs another (the host would block writing it while
    the runner blocks writing its large answer). Before the fix this hung until the host's wall limit."""
    from bonforge.sandbox.config import CodeVerifyConfig
    from bonforge.sandbox.lanes import Background
    from bonforge.sandbox.pool import SandboxPool

    image = request.getfixturevalue("sandbox_image") if backend == "docker" else None
    cfg = CodeVerifyConfig(backend=backend, image=image, pool_size=1, time_limit_s=5.0, candidate_wall_s=60)
    big = "7" * (1 << 20) + "\n"
    spec = parse_spec(json.dumps({"kind": "stdio", "tests": [{"input": big, "output": big}] * 2}), "p")
    reqs = [build_request(spec, f"import sys\nsys.stdout.write(sys.stdin.read())  # {i}\n", cfg, f"r{i}")
            for i in range(3)]  # fmt: skip
    with SandboxPool(cfg) as pool:
        pool.start()
        started = time.monotonic()
        run = Background(pool.run, reqs)
        while run._thread.is_alive() and time.monotonic() - started < 40:
            time.sleep(0.2)
        stuck = run._thread.is_alive()
        pool.close()
    assert not stuck, "the pool's channel blocked on a large request"
    assert [[r["status"] for r in o["results"]] for o in run.result()] == [["ok", "ok"]] * 3
