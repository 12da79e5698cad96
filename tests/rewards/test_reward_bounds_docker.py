"""The code reward through the real sandbox on hostile responses: each scores a float in [0, 1], nothing
raises, and the batch ends within its documented bound (docs/training.md, "How long a reward call takes")."""

from __future__ import annotations

import json
import math
import time

import pytest

from bonforge.rewards.code import code_reward
from bonforge.sandbox.config import CodeVerifyConfig

pytestmark = pytest.mark.docker
TESTS = [{"input": "2 3\n", "output": "5\n"}, {"input": "1 1\n", "output": "2\n"}]
SPEC = json.dumps({"kind": "stdio", "tests": TESTS})
RIGHT = "a, b = map(int, input().split())\nprint(a + b)"


def test_hostile_responses_through_the_pool_are_bounded_and_total(sandbox_image):
    cfg = CodeVerifyConfig(image=sandbox_image, time_limit_s=1.0)
    info = {"problem_id": "add", "question": "Add.", "verify": json.dumps(cfg.key_config())}
    hostile = [
        "```" + " " * 200_000,  # quadratic extraction before: 36.7 s
        "```python\n" + RIGHT + "\n```\n" + "\ud800",  # a surrogate outside the program: judged as usual
        "```python\nprint('\ud800')\n```",  # inside it (it raised UnicodeEncodeError)
        "\x00" * 10_000,
        "```python\nwhile True: pass\n```",
        "```python\nprint('x' * 10**8)\n```",
        "Judgment: 1\n" * 20_000,
        "```python\n" + "(" * 100_000 + "\n```",
    ]
    rm = [{"ground_truth": SPEC}] * len(hostile)
    code_reward([None], [RIGHT], rm[:1], extra_info=[info], pool_size=2)  # the pool's start is not the bound's
    t0 = time.perf_counter()
    scores = code_reward([None] * len(hostile), hostile, rm, extra_info=[info] * len(hostile), pool_size=2)
    elapsed = time.perf_counter() - t0
    assert all(type(s) is float and 0.0 <= s <= 1.0 for s in scores)
    assert scores[1] == 1.0 and scores[2] == 0.0 and scores[4] == 0.0
    budget = 2 * (cfg.time_limit_s * cfg.wall_factor + 1.0)  # tests * W: at most the per-candidate budget
    bound = 1.0 + 3.0 * sum(map(len, hostile)) / 1e6 + math.ceil(len(hostile) / 2) * (budget + 3.0)
    assert elapsed < bound, (elapsed, bound)
