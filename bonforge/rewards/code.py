"""Code reward: the fraction of the problem's tests the response's program passes, run in the sandbox.

The verdicts stage's own code runs it (``judging.code.verify_code``: program extraction, the runner
request, the judge), on this process's warm sandbox pool (``sandbox.pool.shared_pool``): containers start
at the first call and are reused by every later one, never restarted per call (they stop after
``idle_close_s`` without a call, 300 s by default). The returned dict carries
the verdict class (``status``: passed, wrong_answer, runtime_error, compile_error, timeout, memory_limit,
output_limit, sandbox_error, infra_error) beside ``tests_passed``/``tests_total``. A verdict that is no label
(``schema.NO_LABEL``: the sandbox, the problem's checker or the machine failed, even after a run alone) says
nothing of the response: TRL's ``code_reward`` gives it None (TRL leaves a None out of the reward), verl's
``compute_score`` must give a number and gives 0.0 with that ``status`` (mask it with verl's
``reward_extra_info``); a row whose problem cannot be judged
(a malformed spec, a NaN time limit) scores 0 with status ``invalid_problem`` and
an ``error``, and the batch's other rows are judged as usual.

Rows are the RL export's (``rl/train.parquet``, ability ``code``): ``reward_model.ground_truth`` is the
problem's JSON test spec (``bonforge.judging.spec``), ``extra_info.question`` the problem text (HumanEval
completions are appended to it), ``extra_info.verify`` the recipe's checking settings. Execution settings
(``pool_size``, ``backend``) may be passed as keyword arguments (verl: ``reward_kwargs``).
"""

from __future__ import annotations

import logging

import pyarrow as pa

from bonforge.errors import DataError
from bonforge.judging.code import verify_code
from bonforge.judging.spec import parse_spec
from bonforge.rewards import completion_text, ground_truth_of, settings_of, valid_text
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.pool import shared_pool
from bonforge.schema import NO_LABEL

log = logging.getLogger("bonforge.rewards")

EXEC_SETTINGS = ("pool_size", "backend", "transport")


def _config(extra_info: dict | None, kwargs: dict) -> CodeVerifyConfig:
    return CodeVerifyConfig(**settings_of(extra_info), **{k: kwargs[k] for k in EXEC_SETTINGS if k in kwargs})


def _invalid(rows: list[int], results: list[dict], err: DataError) -> None:
    """Rows whose problem cannot be judged (its spec is malformed): score 0 with status ``invalid_problem``
    and the reason; the batch's other rows are judged as usual."""
    log.warning("a reward row's problem cannot be judged: %s", err)
    for i in rows:
        results[i] = {"score": 0.0, "status": "invalid_problem", "tests_passed": 0, "tests_total": 0,
                      "error": str(err)[:500]}  # fmt: skip


def score_batch(texts: list[str], ground_truths: list[str], infos: list[dict | None], **kwargs) -> list[dict]:
    """One result dict per response: all responses of a batch go to the pool at once (in parallel).

    Rows are grouped into problems by their content (question and test spec), never by ``problem_id``
    alone: two rows with one id but different tests are two problems, each judged by its own tests."""
    results: list[dict] = [{}] * len(texts)
    groups: dict[str, list[int]] = {}
    for i, info in enumerate(infos):
        groups.setdefault((info or {}).get("verify") or "", []).append(i)
    for idx in groups.values():
        cfg = _config(infos[idx[0]], kwargs)
        problems: dict[tuple[str, str], dict] = {}  # (question, tests) -> the problem row
        ids: set[str] = set()  # the problems' ids in this batch
        cands = []
        for i in idx:
            info = infos[i] or {}
            question, tests = valid_text(info.get("question")), valid_text(ground_truths[i])
            pid = str(info.get("problem_id") or f"row{i}")
            problem = problems.get((question, tests))
            if problem is None:
                try:
                    parse_spec(tests, pid)
                except DataError as e:
                    _invalid([i], results, e)
                    continue
                unique, n = pid, 1
                while unique in ids:  # the same id with other content: a problem of its own
                    unique, n = f"{pid}#{n}", n + 1
                ids.add(unique)
                problem = problems[(question, tests)] = {"problem_id": unique, "question": question, "tests": tests}
            cands.append({"candidate_id": f"response{i}", "problem_id": problem["problem_id"], "teacher": "policy",
                          "text": valid_text(texts[i])})  # fmt: skip
        if cands:
            verdicts = verify_code(pa.Table.from_pylist(list(problems.values())), pa.Table.from_pylist(cands), cfg,
                                   pool=shared_pool(cfg))  # fmt: skip
            for cand, v in zip(cands, verdicts.to_pylist(), strict=True):
                results[int(cand["candidate_id"].removeprefix("response"))] = {
                    "score": v["reward"], "status": v["status"], "tests_passed": v["tests_passed"],
                    "tests_total": v["tests_total"]}  # fmt: skip
    return results


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """verl's custom reward (``reward.custom_reward_function.name=compute_score``)."""
    return score_batch([solution_str], [ground_truth], [extra_info], **kwargs)[0]


def code_reward(prompts, completions, reward_model, extra_info=None, **kwargs):
    """TRL reward function (``reward_funcs=code_reward``): the batch runs in the pool in parallel."""
    infos = extra_info if extra_info is not None else [None] * len(completions)
    texts = [completion_text(c) for c in completions]
    truths = [ground_truth_of(rm) for rm in reward_model]
    return [None if r["status"] in NO_LABEL else r["score"] for r in score_batch(texts, truths, list(infos), **kwargs)]
