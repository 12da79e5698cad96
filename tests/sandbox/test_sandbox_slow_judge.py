"""The host judges each outcome on the pool's thread as it arrives (a check's replay can take seconds): time
spent judging one answer never counts against the next request, whose answer waits on the channel."""

from __future__ import annotations

import json
import time

from bonforge.judging.code import build_request
from bonforge.judging.spec import parse_spec
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.pool import SandboxPool
from bonforge.sandbox.wire import Request

ONE = parse_spec(json.dumps({"kind": "stdio", "tests": [{"input": "", "output": "ok\n"}]}), "p")


def test_a_slow_judge_does_not_time_out_the_next_request():
    cfg = CodeVerifyConfig(backend="process", pool_size=1, time_limit_s=0.2, candidate_wall_s=1.0)
    with SandboxPool(cfg) as pool:
        requests = [build_request(ONE, f"print('ok')  # {i}\n", cfg, f"r{i}") for i in range(3)]
        limit = pool.request_timeout(Request.read(requests[0]))
        slow = []

        def judge(i: int, outcome: dict) -> dict:
            if i == 0:  # longer than the host's limit of a request: the next one has long finished meanwhile
                time.sleep(limit + 0.5)
            slow.append(i)
            return outcome

        outcomes = pool.run(requests, judge)
    assert sorted(slow) == [0, 1, 2]
    assert [o["results"][0]["status"] for o in outcomes] == ["ok"] * 3, outcomes
