"""GenSelect reward: 1 when the selector's final ``Judgment: <index>`` names a correct candidate, else 0.

A ``<think>…</think>`` block is split off first: only the text after the reasoning counts. The judgment
is then read by the parser ``bonforge eval-selector`` uses (the index after the last ``Judgment:``). An
answer without a judgment, or with an index outside the prompt's candidates, is malformed and scores
``invalid_score`` (default 0; a negative value makes a malformed answer cost more than a wrong pick).

Rows are the GenSelect export's (``verl/train.parquet``): ``reward_model.ground_truth`` is the JSON list
of correct indices, ``extra_info.n_candidates`` the number of candidates in the prompt.
"""

from __future__ import annotations

import json
import sys

from bonforge.rewards import completion_text, ground_truth_of, valid_text
from bonforge.judging.judgment import parse_judgment


def split_think(text: str) -> tuple[str, str]:
    """(reasoning, answer): the answer is what follows the last ``</think>``. An unclosed ``<think>`` is
    reasoning to the end (the answer is what came before it, usually nothing)."""
    end = text.rfind("</think>")
    if end >= 0:
        return text[:end], text[end + len("</think>"):]
    start = text.find("<think>")
    if start >= 0:
        return text[start:], text[:start]
    return "", text


def correct_indices(ground_truth: str) -> set[int]:
    try:
        indices = json.loads(ground_truth)
    except (TypeError, ValueError):  # not a string, or not JSON
        indices = None
    if not isinstance(indices, list) or not all(isinstance(i, int) for i in indices):
        raise ValueError(f"reward_model.ground_truth: expected a JSON list of indices, got {ground_truth!r:.200}")
    return set(indices)


def judge(text: str | None, correct: set[int], n_candidates: int | None, invalid_score: float = 0.0) -> dict:
    """``score``, ``parsed`` (the index, -1 when malformed) and ``format_ok`` for one answer."""
    index = parse_judgment(split_think(valid_text(text))[1], n_candidates if n_candidates is not None else sys.maxsize)
    if index is None:
        return {"score": float(invalid_score), "parsed": -1, "format_ok": False}
    return {"score": 1.0 if index in correct else 0.0, "parsed": index, "format_ok": True}


def compute_score(data_source, solution_str, ground_truth, extra_info=None, invalid_score: float = 0.0, **kwargs):
    """verl's custom reward (``reward.custom_reward_function.name=compute_score``)."""
    n = (extra_info or {}).get("n_candidates")
    return judge(solution_str, correct_indices(ground_truth), n, invalid_score)


def genselect_reward(prompts, completions, reward_model, extra_info=None, invalid_score: float = 0.0, **kwargs):
    """TRL reward function (``reward_funcs=genselect_reward``) over a batch of the export's rows."""
    infos = extra_info if extra_info is not None else [None] * len(completions)
    return [
        judge(completion_text(c), correct_indices(ground_truth_of(rm)), (info or {}).get("n_candidates"),
              invalid_score)["score"]
        for c, rm, info in zip(completions, reward_model, infos, strict=True)
    ]  # fmt: skip
