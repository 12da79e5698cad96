"""Math reward: 1 when the response's final answer equals the gold answer under math-verify, else 0.

The verdicts stage's own check runs it (``tasks.verify_math.check_answer``): the same answer reading (the
recipe's patterns and math-verify settings travel with each row as ``extra_info.verify``) in a reused
child process killed on a hard wall-clock limit (``timeout_s``, default the settings' 5 s), so a
response that makes sympy hang scores 0 with status ``timeout`` and the trainer goes on. Nothing relies
on SIGALRM: trainers call rewards from threads and worker processes.

Rows are the RL export's (``rl/train.parquet``, ability ``math``): ``reward_model.ground_truth`` is the
problem's gold final answer as the verdicts stage read it (``judging.math_rules.gold_answer``); a worked
solution given as ground truth is read the same way.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from bonforge.judging.config import MathVerifyConfig
from bonforge.rewards import completion_text, ground_truth_of, settings_of, valid_text
from bonforge.judging.math import check_answer


def score(text: str | None, gold: str, extra_info: dict | None, timeout_s: float | None = None) -> dict:
    """``score``, ``status`` (correct, wrong_answer, no_answer, timeout, error) and ``extracted``."""
    result = check_answer(valid_text(text), gold, MathVerifyConfig(**settings_of(extra_info)), timeout_s)
    return {"score": 1.0 if result.correct else 0.0, "status": result.status, "extracted": result.extracted or ""}


def compute_score(data_source, solution_str, ground_truth, extra_info=None, timeout_s: float | None = None, **kwargs):
    """verl's custom reward (``reward.custom_reward_function.name=compute_score``)."""
    return score(solution_str, ground_truth, extra_info, timeout_s)


def math_reward(prompts, completions, reward_model, extra_info=None, timeout_s: float | None = None, **kwargs):
    """TRL reward function (``reward_funcs=math_reward``): the batch is checked in parallel (one checker
    process per CPU at most)."""
    infos = extra_info if extra_info is not None else [None] * len(completions)
    items = list(zip(completions, reward_model, infos, strict=True))
    with ThreadPoolExecutor(max(1, min(len(items), os.cpu_count() or 1))) as pool:
        results = pool.map(lambda it: score(completion_text(it[0]), ground_truth_of(it[1]), it[2], timeout_s), items)
        return [r["score"] for r in results]
