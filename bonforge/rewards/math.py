"""Math reward: 1 when the response's final answer equals the gold answer under math-verify, else 0.

The verdicts stage's own code checks it: the same answer extraction (last ``\\boxed{}``, the recipe's
patterns, the last number; the settings travel with each row as ``extra_info.verify``) and math-verify in
a reused child process that is killed on a hard wall-clock limit (``timeout_s``), so a response that
makes sympy hang scores 0 with status ``timeout`` and the trainer goes on. Nothing relies on SIGALRM:
trainers call rewards from threads and worker processes. One child per process, shared by its threads.

Rows are the RL export's (``rl/train.parquet``, ability ``math``): ``reward_model.ground_truth`` is the
gold final answer.
"""

from __future__ import annotations

import os
import threading

from bonforge.config import MathVerifyConfig
from bonforge.rewards import completion_text, ground_truth_of, settings_of
from bonforge.tasks import verify_math

_lock = threading.Lock()
_checker: tuple[int, verify_math.HardTimeoutChecker] | None = None  # (owner pid, checker)


def _check(items: list[tuple[str, str]], cfg: MathVerifyConfig, timeout_s: float) -> list[tuple[str, str | None]]:
    """(status, extracted answer) per (response, gold): correct, wrong_answer, no_answer, timeout or error.
    The one seam to the verdicts stage's checking code."""
    global _checker
    out: list[tuple[str, str | None]] = []
    work = []
    for i, (text, gold) in enumerate(items):
        pred, want = verify_math.extract_answer(text, cfg), verify_math.gold_answer(gold, cfg)
        out.append(("error" if want is None else "no_answer", pred))
        if want is not None and pred is not None:
            work.append((i, want, pred))
    if work:
        with _lock:  # one child per process; a forked process starts its own instead of sharing the parent's
            if _checker is None or _checker[0] != os.getpid():
                _checker = (os.getpid(), verify_math.HardTimeoutChecker())
            results = _checker[1].check(work, timeout_s)
        for i, (status, _err, _ms) in results.items():
            out[i] = (status, out[i][1])
    return out


def _result(status: str, extracted: str | None) -> dict:
    return {"score": 1.0 if status == "correct" else 0.0, "status": status, "extracted": extracted or ""}


def compute_score(data_source, solution_str, ground_truth, extra_info=None, timeout_s: float = 5.0, **kwargs):
    """verl's custom reward (``reward.custom_reward_function.name=compute_score``)."""
    cfg = MathVerifyConfig(**settings_of(extra_info))
    return _result(*_check([(solution_str or "", ground_truth)], cfg, timeout_s)[0])


def math_reward(prompts, completions, reward_model, extra_info=None, timeout_s: float = 5.0, **kwargs):
    """TRL reward function (``reward_funcs=math_reward``): one checker round trip per batch."""
    infos = extra_info if extra_info is not None else [None] * len(completions)
    rows = list(zip(completions, reward_model, infos, strict=True))
    scores = [0.0] * len(rows)
    by_settings: dict[str, list[int]] = {}
    for i, (_c, _rm, info) in enumerate(rows):
        by_settings.setdefault((info or {}).get("verify") or "", []).append(i)
    for raw, idx in by_settings.items():
        cfg = MathVerifyConfig(**settings_of({"verify": raw}))
        checked = _check([(completion_text(rows[i][0]), ground_truth_of(rows[i][1])) for i in idx], cfg, timeout_s)
        for i, (status, extracted) in zip(idx, checked):
            scores[i] = _result(status, extracted)["score"]
    return scores
