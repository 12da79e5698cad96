"""Stage `problem_stats`: per problem, overall (teacher ``*``) and per teacher — n, n_correct, pass rate,
unbiased pass@k, majority@k, max@k — and the keep/drop decision of the recipe's filter.

Definitions (k in 1, 2, 4, ... <= n unless the recipe lists ks):

* pass@k = 1 − C(n−c, k) / C(n, k), the chance that a random k-subset holds a correct candidate.
* max@k = E[max reward of a random k-subset] = Σ_i r_(i) · C(i−1, k−1) / C(n, k) over rewards sorted
  ascending (i is 1-based); with 0/1 rewards it equals pass@k.
* majority@k = the chance that a majority vote over the extracted answers of a random k-subset is
  correct. Candidates without an answer do not vote. Ties are split evenly: a vote whose top count is
  shared by t answers, of which g are correct, scores g / t (a uniform random tie-break, in expectation).
  Exact by enumeration when C(n, k) <= 512; else exact over count vectors (how many of each answer group
  a k-subset holds; each has probability Π C(size, count) / C(n, k)) when there are at most 100,000 of
  them, which covers every pool of up to 16 candidates; else the mean over 512 subsets drawn with a seed
  derived from the problem id (deterministic). Null for problems without extracted answers (code).

The stage streams its input (``Stage.stream``): shards of whole problems as they are read. It works on
whole shards at once: groups of equal size are scored as matrices, and majority@k is
computed once per distinct answer-group signature (group sizes, which are correct, how many gave none).
"""

from __future__ import annotations

import hashlib
import itertools
from functools import lru_cache
from math import comb, prod
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bonforge.config import FilterConfig, Recipe, ScoreConfig
from bonforge.schema import PROBLEM_STATS
from bonforge.stage import Inputs, Node, Ref, Stage

VERSION = "3"  # 3: majority@k exact from answer-count vectors where they are few (sampled beyond C(n, k) = 512 before)
_SAMPLES = 512  # random subsets of a sampled majority@k
_VECTOR_LIMIT = 100_000  # at most this many answer-count vectors: majority@k is exact
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


def _answer_groups(answers: list[str | None], correct: list[bool]) -> tuple[np.ndarray, np.ndarray]:
    """(group label of each candidate, -1 = no answer; whether each group holds a correct candidate)."""
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
    return groups, np.array(group_correct, dtype=float)


def _n_vectors(sizes: tuple[int, ...], k: int) -> int:
    """An upper bound on the count vectors of k-subsets over groups of these sizes."""
    return prod(min(s, k) + 1 for s in sizes)


def _exact_majority(sizes: tuple[int, ...], correct: tuple[bool, ...], none: int, k: int) -> float:
    """majority@k over all k-subsets, summed over count vectors x (x_j candidates of answer group j, the
    rest without an answer; Σ x = k) weighted by Π C(s_j, x_j) / C(n, k)."""
    parts = (*sizes, none)
    vectors, total = np.zeros((1, 0), dtype=np.int64), np.zeros(1, dtype=np.int64)
    for s in parts:
        x = np.arange(min(s, k) + 1)
        rows, cols = np.nonzero(total[:, None] + x[None, :] <= k)
        vectors, total = np.hstack([vectors[rows], x[cols, None]]), total[rows] + x[cols]
    vectors = vectors[total == k]
    weight = np.ones(len(vectors))
    for j, s in enumerate(parts):
        weight *= np.array([float(comb(s, x)) for x in range(min(s, k) + 1)])[vectors[:, j]]
    votes = vectors[:, :-1]
    top = votes.max(axis=1, keepdims=True)
    tied = (votes == top) & (top > 0)
    won = (tied * np.array(correct, dtype=float)).sum(axis=1) / np.maximum(tied.sum(axis=1), 1)
    return float(weight @ won / float(comb(sum(parts), k)))


def _sampled_majority(groups: np.ndarray, group_correct: np.ndarray, k: int, seed_text: str) -> float:
    """The mean vote score of _SAMPLES random k-subsets (the first k of a random permutation of each row),
    drawn with a seed from ``seed_text`` and k."""
    seed = int.from_bytes(hashlib.sha256(f"{seed_text}/{k}".encode()).digest()[:8], "little")
    index = np.random.default_rng(seed).random((_SAMPLES, len(groups))).argsort(axis=1)[:, :k]
    return float(np.mean(_votes(groups[index], group_correct)))


@lru_cache(maxsize=256)
def _combinations(n: int, k: int) -> np.ndarray:
    return np.array(list(itertools.combinations(range(n), k)), dtype=np.int64).reshape(-1, k)


@lru_cache(maxsize=65536)
def _signature_majority(sizes: tuple[int, ...], correct: tuple[bool, ...], none: int, k: int) -> float | None:
    """Exact majority@k of a signature (answer group sizes, which are correct, how many gave no answer):
    by enumerating the subsets when there are at most _SAMPLES of them, else over count vectors when they
    are few; None where it must be sampled."""
    n = sum(sizes) + none
    if comb(n, k) <= _SAMPLES:
        groups = np.r_[np.repeat(np.arange(len(sizes)), sizes), np.full(none, -1)]
        return float(np.mean(_votes(groups[_combinations(n, k)], np.array(correct, dtype=float))))
    if _n_vectors((*sizes, none), k) <= _VECTOR_LIMIT and comb(n, k) < 1e300:
        return _exact_majority(sizes, correct, none, k)
    return None


def majority_at_k(answers: list[str | None], correct: list[bool], k: int, seed_text: str) -> float | None:
    groups, group_correct = _answer_groups(answers, correct)
    if not len(group_correct):
        return None
    sizes = np.bincount(groups[groups >= 0], minlength=len(group_correct))
    exact = _signature_majority(tuple(sizes.tolist()), tuple(group_correct.astype(bool).tolist()),
                                int((groups < 0).sum()), k)
    return exact if exact is not None else _sampled_majority(groups, group_correct, k, seed_text)


def drop_reason(n: int, rate: float, cfg: FilterConfig) -> str | None:
    if n < cfg.min_candidates:
        return f"too few candidates ({n} < {cfg.min_candidates})"
    if rate <= cfg.min_pass_rate:
        return f"too hard: pass rate {rate:.3f} <= min_pass_rate {cfg.min_pass_rate}"
    if rate > cfg.max_pass_rate:
        return f"too easy: pass rate {rate:.3f} > max_pass_rate {cfg.max_pass_rate}"
    return None


def _ks(n: int, ks_cfg: list[int] | None) -> list[int]:
    return [k for k in (ks_cfg or default_ks(n)) if k <= n]


def _signatures(codes: np.ndarray, correct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``codes`` (answer codes of G groups of n candidates, -1 = no answer): a canonical
    signature (its answer groups as 2·size + correct, largest first, then the no-answer count), as
    (unique signatures, index of each row's signature)."""
    g, n = codes.shape
    c = np.sort(codes * 2 + correct, axis=1)  # a group's candidates side by side, correct ones last
    code = c >> 1
    last = np.ones((g, n), dtype=bool)  # the last candidate of its answer group
    last[:, :-1] = code[:, 1:] != code[:, :-1]
    run = np.cumsum(np.c_[np.ones((g, 1), dtype=bool), last[:, :-1]], axis=1) - 1
    sizes = np.bincount((run + np.arange(g)[:, None] * n).ravel(), minlength=g * n).reshape(g, n)
    ends = np.zeros((g, n), dtype=np.int64)
    ends[np.nonzero(last)[0], run[last]] = (c[last] & 1) + 2 * sizes[np.nonzero(last)[0], run[last]]
    none = (codes < 0).sum(axis=1)
    ends[none > 0, 0] = 0  # the no-answer run sorts first
    sig = np.ascontiguousarray(np.column_stack([-np.sort(-ends, axis=1), none]))
    rows = sig.view(np.dtype((np.void, sig.itemsize * sig.shape[1]))).ravel()
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    return sig[first], inverse


def _majority_block(codes: np.ndarray, correct: np.ndarray, ks: list[int], seed_texts) -> np.ndarray:
    """majority@k of each row (NaN: no answers at all), per k: exact per signature where cheap, else
    sampled with the row's seed."""
    uniq, inverse = _signatures(codes, correct)
    out = np.empty((len(codes), len(ks)))
    for u, sig in enumerate(uniq):
        sizes = tuple(int(e) // 2 for e in sig[:-1] if e > 0)
        good = tuple(bool(e % 2) for e in sig[:-1] if e > 0)
        rows = np.flatnonzero(inverse.ravel() == u)
        for j, k in enumerate(ks):
            if not sizes:
                out[rows, j] = np.nan
            elif (value := _signature_majority(sizes, good, int(sig[-1]), k)) is not None:
                out[rows, j] = value
            else:
                for r in rows:
                    groups, gc = _answer_groups([None if a < 0 else int(a) for a in codes[r]], list(correct[r]))
                    out[r, j] = _sampled_majority(groups, gc, k, seed_texts(r))
    return out


def _kmap(values: np.ndarray, ks: list[int], mask: np.ndarray | None = None) -> pa.MapArray:
    g = len(values)
    return pa.MapArray.from_arrays(pa.array(np.arange(g + 1, dtype=np.int32) * len(ks)),
                                   pa.array(np.tile(np.array(ks, dtype=np.int32), g)),
                                   pa.array(values.ravel(), pa.float64()), type=PROBLEM_STATS.field("pass_at_k").type,
                                   mask=None if mask is None else pa.array(mask))


def score(verdicts: pa.Table, score_cfg: ScoreConfig, filter_cfg: FilterConfig) -> pa.Table:
    """PROBLEM_STATS rows for every problem of ``verdicts`` (a shard of whole problems): per problem the
    overall row (teacher ``*``), then one per teacher, in problem and teacher order."""
    t = verdicts.select(["problem_id", "teacher", "candidate_id", "correct", "reward", "extracted"]).sort_by(
        [("problem_id", "ascending"), ("teacher", "ascending"), ("candidate_id", "ascending")]
    )
    if not t.num_rows:
        return PROBLEM_STATS.empty_table()

    def codes(name: str) -> np.ndarray:  # equal strings, equal codes; null -1
        col = pc.dictionary_encode(t.column(name)).combine_chunks().indices
        return pc.fill_null(col, -1).to_numpy(zero_copy_only=False).astype(np.int64)

    pid, tch, answer = codes("problem_id"), codes("teacher"), codes("extracted")
    correct = t.column("correct").to_numpy(zero_copy_only=False).astype(bool)
    rewards = t.column("reward").to_numpy(zero_copy_only=False).astype(float)

    # segments: each problem's candidates (overall), then each of its teachers' candidates
    new_pid = np.r_[True, pid[1:] != pid[:-1]]
    p_start, t_start = np.flatnonzero(new_pid), np.flatnonzero(new_pid | np.r_[True, tch[1:] != tch[:-1]])
    start = np.r_[p_start, t_start]
    length = np.r_[np.diff(np.r_[p_start, len(t)]), np.diff(np.r_[t_start, len(t)])]
    problem = np.searchsorted(p_start, start, side="right") - 1
    overall = np.r_[np.ones(len(p_start), bool), np.zeros(len(t_start), bool)]
    order = np.lexsort((start, ~overall, problem))
    start, length, problem, overall = start[order], length[order], problem[order], overall[order]

    c_sum = np.r_[0, np.cumsum(correct)]
    n_correct = c_sum[start + length] - c_sum[start]
    reasons = np.array([drop_reason(n, c / n, filter_cfg)
                        for n, c in zip(length[overall].tolist(), n_correct[overall].tolist())], dtype=object)

    blocks, positions = [], []
    for n in np.unique(length).tolist():
        seg = np.flatnonzero(length == n)
        idx = start[seg, None] + np.arange(n)
        ks = _ks(n, score_cfg.ks)
        ok, rw = correct[idx], rewards[idx]
        c = ok.sum(axis=1)
        pass_table = np.array([[pass_at_k(n, ci, k) for k in ks] for ci in range(n + 1)])
        weights = np.column_stack([rank_weights(n, k) for k in ks])
        first = pa.array(start[seg])
        teacher = pc.if_else(pa.array(overall[seg]), ALL, t.column("teacher").take(first))
        seeds = lambda r, first=first, teacher=teacher: (  # noqa: E731  (only where majority@k is sampled)
            f"{t.column('problem_id')[first[r].as_py()]}/{teacher[r]}")
        maj = _majority_block(answer[idx], ok, ks, seeds)
        no_answers = np.isnan(maj[:, 0])
        reason = reasons[problem[seg]]
        blocks.append(pa.table({
            "problem_id": t.column("problem_id").take(first),
            "teacher": teacher,
            "n": pa.array(np.full(len(seg), n, dtype=np.int32)),
            "n_correct": pa.array(c.astype(np.int32)),
            "pass_rate": pa.array(c / n),
            "mean_reward": pa.array(rw.mean(axis=1)),
            "pass_at_k": _kmap(pass_table[c], ks),
            "majority_at_k": _kmap(np.where(no_answers[:, None], 0.0, maj), ks, no_answers),
            "max_at_k": _kmap(np.sort(rw, axis=1) @ weights, ks),
            "keep": pa.array(reason == None),  # noqa: E711  (elementwise)
            "drop_reason": pa.array(reason, pa.string()),
        }, schema=PROBLEM_STATS))
        positions.append(seg)
    out = pa.concat_tables(blocks)
    return out.take(pa.array(np.argsort(np.concatenate(positions), kind="stable")))


_COLUMNS = ["problem_id", "teacher", "candidate_id", "correct", "reward", "extracted"]


def _verdicts(i: Inputs) -> Iterator[pa.Table]:
    """Every teacher's verdicts, in chunks of whole problems (streamed: never the whole table at once)."""
    with i.aligned({"verdicts": _COLUMNS}) as chunks:
        for chunk in chunks:
            yield chunk["verdicts"]


STAGE = Stage("problem_stats", VERSION, schema=PROBLEM_STATS, compute=score, shard_rows=200_000, stream=_verdicts)


def node(recipe: Recipe, verdicts: list[Ref]) -> Node:
    return STAGE.bind({"score": recipe.score.key_config(), "filter": recipe.filter.key_config()},
                      {"verdicts": verdicts}, params={"score_cfg": recipe.score, "filter_cfg": recipe.filter})


def filter_counts(i: Inputs) -> dict[str, int]:
    """Problems the filter kept (``kept``) and dropped, by reason ("too hard", "too easy", ...), most first."""
    t = i.sql("SELECT CASE WHEN keep THEN 'kept' ELSE trim(regexp_extract(drop_reason, '^[a-z ]+')) END AS why, "
              "count(*) AS n FROM problem_stats WHERE teacher = '*' GROUP BY why ORDER BY n DESC, why")
    return dict(zip(t.column("why").to_pylist(), t.column("n").to_pylist()))
