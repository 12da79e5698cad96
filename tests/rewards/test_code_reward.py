"""The code reward through the real sandbox: fractions of tests passed, verdict classes, one warm pool
for every call of a process (its containers are not restarted between calls)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from bonforge.rewards.code import code_reward, compute_score
from bonforge.sandbox.config import CodeVerifyConfig

pytestmark = pytest.mark.docker
SPEC = json.dumps({"kind": "stdio",
                   "tests": [{"input": "2 3\n", "output": "5\n"}, {"input": "10 -4\n", "output": "6\n"}]})


def fenced(program: str) -> str:
    return f"Here is my solution.\n```python\n{program}\n```\n"


def our_containers() -> list[str]:
    names = subprocess.run(["docker", "ps", "--format", "{{.Names}}"], capture_output=True, text=True, check=True)
    return sorted(n for n in names.stdout.split() if n.startswith(f"bonforge-sbx-{os.getpid()}-"))


def test_code_reward_scores_the_fraction_passed_in_one_warm_pool(sandbox_image):
    before = set(our_containers())  # pools of earlier tests in this process
    info = {"problem_id": "add", "question": "Add two integers.",
            "verify": json.dumps(CodeVerifyConfig(image=sandbox_image, time_limit_s=2).key_config())}  # fmt: skip
    rm = {"style": "rule", "ground_truth": SPEC}
    right = "a, b = map(int, input().split())\nprint(a + b)"
    half = "a, b = map(int, input().split())\nprint(a + b if a < 5 else 0)"
    scores = code_reward([None] * 4, [fenced(right), fenced(half), fenced("import sys\nsys.exit(3)"), "no code"],
                         reward_model=[rm] * 4, extra_info=[info] * 4, pool_size=2)  # fmt: skip
    assert scores == [1.0, 0.5, 0.0, 0.0]
    warm = sorted(set(our_containers()) - before)
    assert len(warm) == 2
    again = compute_score("bonforge/x", fenced(half), SPEC, info, pool_size=2)
    assert again == {"score": 0.5, "status": "wrong_answer", "tests_passed": 1, "tests_total": 2}
    crash = compute_score("bonforge/x", fenced("raise SystemExit(input())"), SPEC, info, pool_size=2)
    assert (crash["score"], crash["status"]) == (0.0, "runtime_error")
    assert sorted(set(our_containers()) - before) == warm  # the same containers served every call


def test_trl_gets_none_for_a_verdict_without_a_label(monkeypatch):
    """A response whose verdict is no label (infra_error, sandbox_error) has no reward: TRL's reward function
    gives None (TRL leaves it out), verl's ``compute_score`` 0.0 with the status beside it."""
    from bonforge.rewards import code as reward

    verdicts = [{"score": 0.0, "status": "infra_error"}, {"score": 1.0, "status": "passed"},
                {"score": 0.0, "status": "sandbox_error"}, {"score": 0.0, "status": "wrong_answer"}]
    monkeypatch.setattr(reward, "score_batch", lambda texts, *a, **k: verdicts[: len(texts)])
    assert reward.code_reward(["p"] * 4, ["a"] * 4, [{"ground_truth": "{}"}] * 4) == [None, 1.0, None, 0.0]
    assert reward.compute_score("d", "a", "{}") == {"score": 0.0, "status": "infra_error"}
