"""Code reward: the fraction of the problem's tests the response's program passes, run in the sandbox.

The verdicts stage's own code runs it (``tasks.verify_code``: program extraction, the runner request,
the judge), on this process's warm sandbox pool (``sandbox.pool.shared_pool``): containers start at the
first call and are reused by every later one, never restarted per call. The returned dict carries the
verdict class (``status``: passed, wrong_answer, runtime_error, compile_error, timeout, memory_limit,
output_limit, sandbox_error) beside ``tests_passed``/``tests_total``.

Rows are the RL export's (``rl/train.parquet``, ability ``code``): ``reward_model.ground_truth`` is the
problem's JSON test spec (``bonforge.judging.spec``), ``extra_info.question`` the problem text (HumanEval
completions are appended to it), ``extra_info.verify`` the recipe's checking settings. Execution settings
(``pool_size``, ``backend``) may be passed as keyword arguments (verl: ``reward_kwargs``).
"""

from __future__ import annotations

import pyarrow as pa

from bonforge.rewards import completion_text, ground_truth_of, settings_of
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.pool import shared_pool
from bonforge.judging.code import verify_code

EXEC_SETTINGS = ("pool_size", "backend", "transport")


def _config(extra_info: dict | None, kwargs: dict) -> CodeVerifyConfig:
    return CodeVerifyConfig(**settings_of(extra_info), **{k: kwargs[k] for k in EXEC_SETTINGS if k in kwargs})


def score_batch(texts: list[str], ground_truths: list[str], infos: list[dict | None], **kwargs) -> list[dict]:
    """One result dict per response: all responses of a batch go to the pool at once (in parallel)."""
    results: list[dict] = [{}] * len(texts)
    groups: dict[str, list[int]] = {}
    for i, info in enumerate(infos):
        groups.setdefault((info or {}).get("verify") or "", []).append(i)
    for idx in groups.values():
        cfg = _config(infos[idx[0]], kwargs)
        problems: dict[str, dict] = {}
        cands = []
        for i in idx:
            info = infos[i] or {}
            pid = str(info.get("problem_id") or f"row{i}")
            problems.setdefault(pid, {"problem_id": pid, "question": info.get("question") or "",
                                      "tests": ground_truths[i]})  # fmt: skip
            cands.append({"candidate_id": f"response{i}", "problem_id": pid, "teacher": "policy", "text": texts[i]})
        verdicts = verify_code(pa.Table.from_pylist(list(problems.values())), pa.Table.from_pylist(cands), cfg,
                               pool=shared_pool(cfg))  # fmt: skip
        for i, v in zip(idx, verdicts.to_pylist()):
            results[i] = {"score": v["reward"], "status": v["status"], "tests_passed": v["tests_passed"],
                          "tests_total": v["tests_total"]}  # fmt: skip
    return results


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """verl's custom reward (``reward.custom_reward_function.name=compute_score``)."""
    return score_batch([solution_str or ""], [ground_truth], [extra_info], **kwargs)[0]


def code_reward(prompts, completions, reward_model, extra_info=None, **kwargs):
    """TRL reward function (``reward_funcs=code_reward``): the batch runs in the pool in parallel."""
    infos = extra_info if extra_info is not None else [None] * len(completions)
    texts = [completion_text(c) for c in completions]
    truths = [ground_truth_of(rm) for rm in reward_model]
    return [r["score"] for r in score_batch(texts, truths, list(infos), **kwargs)]
