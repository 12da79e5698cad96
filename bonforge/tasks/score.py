"""Stage `problem_stats`: per problem, overall (teacher ``*``) and per teacher — n, n_correct, pass rate,
unbiased pass@k, majority@k, max@k — and the keep/drop decision of the recipe's filter.

Definitions (k in 1, 2, 4, ... <= n unless the recipe lists ks):

* pass@k = 1 − C(n−c, k) / C(n, k), the chance that a random k-subset holds a correct candidate.
* max@k = E[max reward of a random k-subset] = Σ_i r_(i) · C(i−1, k−1) / C(n, k) over rewards sorted
  ascending (i is 1-based); with 0/1 rewards it equals pass@k.
* majority@k = the chance that a majority vote over the extracted answers of a random k-subset is
  correct. Candidates without an answer do not vote. Ties are split evenly: a vote whose top count is
  shared by t answers, of which g are correct, scores g / t (a uniform random tie-break, in expectation).
  Exact by enumeration when C(n, k) <= 512, else the mean over 512 subsets drawn with a seed derived from
  the problem id (deterministic). Null for problems without extracted answers (code).
"""

from __future__ import annotations

import hashlib
import itertools
from functools import lru_cache
from math import comb

import numpy as np
import pyarrow as pa

from bonforge.config import FilterConfig, Recipe, ScoreConfig
from bonforge.schema import PROBLEM_STATS
from bonforge.stage import Inputs, Node, Ref, Stage

VERSION = "2"  # 2: majority@k draws its random subsets in one batch (other values unchanged)
_EXACT_LIMIT = 512
ALL = "*"


def default_ks(n: int) -> list[int]:
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    return ks


def pass_at_k(n: int, c: int, k: int) -> float:
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def rank_weights(n: int, k: int) -> np.ndarray:
    """The chance that the i-th smallest of n (0-based i) is the largest of a random k-subset:
    C(i, k−1) / C(n, k)."""
    return np.array([comb(i, k - 1) for i in range(n)], dtype=float) / comb(n, k)


def max_at_k(rewards: np.ndarray, k: int) -> float:
    r = np.sort(np.asarray(rewards, dtype=float))
    return float(np.dot(r, rank_weights(len(r), k)))


def _votes(subsets: np.ndarray, group_correct: np.ndarray) -> np.ndarray:
    """Score of the majority vote of each row of ``subsets`` (answer-group labels, -1 = no answer)."""
    n_rows, width = len(subsets), len(group_correct) + 1  # column width - 1 counts "no answer"
    cells = np.where(subsets >= 0, subsets, width - 1) + np.arange(n_rows)[:, None] * width
    counts = np.bincount(cells.ravel(), minlength=n_rows * width).reshape(n_rows, width)[:, :-1]
    top = (counts == counts.max(axis=1, keepdims=True)) & (counts > 0)
    n_top = top.sum(axis=1)
    return np.where(n_top > 0, (top * group_correct).sum(axis=1) / np.maximum(n_top, 1), 0.0)


@lru_cache(maxsize=256)
def _combinations(n: int, k: int) -> np.ndarray:
    return np.array(list(itertools.combinations(range(n), k)), dtype=np.int64).reshape(-1, k)


def majority_at_k(answers: list[str | None], correct: list[bool], k: int, seed_text: str) -> float | None:
    labels: dict[str, int] = {}
    group_correct: list[bool] = []
    groups = np.empty(len(answers), dtype=np.int64)
    for i, (a, ok) in enumerate(zip(answers, correct)):
        if a is None:
            groups[i] = -1
            continue
        if a not in labels:
            labels[a] = len(labels)
            group_correct.append(False)
        groups[i] = labels[a]
        group_correct[labels[a]] |= bool(ok)
    if not labels:
        return None
    gc = np.array(group_correct, dtype=float)
    n = len(answers)
    if comb(n, k) <= _EXACT_LIMIT:
        index = _combinations(n, k)
    else:  # _EXACT_LIMIT random k-subsets at once: the first k of a random permutation of each row
        seed = int.from_bytes(hashlib.sha256(f"{seed_text}/{k}".encode()).digest()[:8], "little")
        index = np.random.default_rng(seed).random((_EXACT_LIMIT, n)).argsort(axis=1)[:, :k]
    return float(np.mean(_votes(groups[index], gc)))


def _stats_row(pid: str, teacher: str, correct: np.ndarray, rewards: np.ndarray, answers: list, ks_cfg) -> dict:
    n, c = len(correct), int(correct.sum())
    ks = [k for k in (ks_cfg or default_ks(n)) if k <= n]
    has_answers = any(a is not None for a in answers)
    return {
        "problem_id": pid,
        "teacher": teacher,
        "n": n,
        "n_correct": c,
        "pass_rate": c / n,
        "mean_reward": float(rewards.mean()),
        "pass_at_k": [(k, pass_at_k(n, c, k)) for k in ks],
        "majority_at_k": [(k, majority_at_k(answers, list(correct), k, f"{pid}/{teacher}")) for k in ks]
        if has_answers else None,
        "max_at_k": [(k, max_at_k(rewards, k)) for k in ks],
    }


def drop_reason(n: int, rate: float, cfg: FilterConfig) -> str | None:
    if n < cfg.min_candidates:
        return f"too few candidates ({n} < {cfg.min_candidates})"
    if rate <= cfg.min_pass_rate:
        return f"too hard: pass rate {rate:.3f} <= min_pass_rate {cfg.min_pass_rate}"
    if rate > cfg.max_pass_rate:
        return f"too easy: pass rate {rate:.3f} > max_pass_rate {cfg.max_pass_rate}"
    return None


def score(verdicts: pa.Table, score_cfg: ScoreConfig, filter_cfg: FilterConfig) -> pa.Table:
    """PROBLEM_STATS rows for every problem of ``verdicts`` (a shard of whole problems)."""
    t = verdicts.select(["problem_id", "teacher", "candidate_id", "correct", "reward", "extracted"]).sort_by(
        [("problem_id", "ascending"), ("teacher", "ascending"), ("candidate_id", "ascending")]
    )
    pids = t.column("problem_id").to_numpy(zero_copy_only=False)
    teachers = t.column("teacher").to_numpy(zero_copy_only=False)
    correct = t.column("correct").to_numpy(zero_copy_only=False).astype(bool)
    rewards = t.column("reward").to_numpy(zero_copy_only=False).astype(float)
    answers = t.column("extracted").to_pylist()
    rows: list[dict] = []
    bounds = np.flatnonzero(pids[1:] != pids[:-1]) + 1 if len(pids) else np.array([], dtype=int)
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(pids)]):
        if hi <= lo:
            continue
        pid = pids[lo]
        overall = _stats_row(pid, ALL, correct[lo:hi], rewards[lo:hi], answers[lo:hi], score_cfg.ks)
        reason = drop_reason(overall["n"], overall["pass_rate"], filter_cfg)
        group = [overall]
        tch = teachers[lo:hi]
        tb = np.flatnonzero(tch[1:] != tch[:-1]) + 1
        for a, b in zip(np.r_[0, tb], np.r_[tb, hi - lo]):
            group.append(_stats_row(pid, tch[a], correct[lo + a:lo + b], rewards[lo + a:lo + b],
                                    answers[lo + a:lo + b], score_cfg.ks))
        for row in group:
            row["keep"], row["drop_reason"] = reason is None, reason
        rows.extend(group)
    return pa.Table.from_pylist(rows, schema=PROBLEM_STATS)


STAGE = Stage("problem_stats", VERSION, compute=score, shard_rows=200_000,
              table=lambda i: i.sql("SELECT problem_id, teacher, candidate_id, correct, reward, extracted FROM verdicts"))


def node(recipe: Recipe, verdicts: list[Ref]) -> Node:
    return STAGE.bind({"score": recipe.score.key_config(), "filter": recipe.filter.key_config()},
                      {"verdicts": verdicts}, params={"score_cfg": recipe.score, "filter_cfg": recipe.filter})


def filter_counts(i: Inputs) -> dict[str, int]:
    """Problems the filter kept (``kept``) and dropped, by reason ("too hard", "too easy", ...), most first."""
    t = i.sql("SELECT CASE WHEN keep THEN 'kept' ELSE trim(regexp_extract(drop_reason, '^[a-z ]+')) END AS why, "
              "count(*) AS n FROM problem_stats WHERE teacher = '*' GROUP BY why ORDER BY n DESC, why")
    return dict(zip(t.column("why").to_pylist(), t.column("n").to_pylist()))
