"""Best-of-N metrics of a pool of candidates: unbiased pass@k, max@k and its rank weights, majority@k.

* pass@k = 1 − C(n−c, k) / C(n, k), the chance that a random k-subset holds a correct candidate.
* max@k = E[max reward of a random k-subset] = Σ_i r_(i) · C(i−1, k−1) / C(n, k) over rewards sorted
  ascending (i is 1-based); with 0/1 rewards it equals pass@k.
* majority@k = the chance that a majority vote over the extracted answers of a random k-subset is
  correct. Candidates without an answer do not vote. Ties are split evenly: a vote whose top count is
  shared by t answers, of which g are correct, scores g / t (a uniform random tie-break, in expectation).
  Exact by enumeration when C(n, k) <= 512; else exact over count vectors (how many of each answer group
  a k-subset holds; each has probability Π C(size, count) / C(n, k)) when there are at most 100,000 of
  them, which covers every pool of up to 16 candidates; else the mean over 512 subsets drawn with a seed
  derived from the problem id (deterministic). None for pools without extracted answers (code).

``majority_block`` scores many pools of equal size at once: majority@k is computed once per distinct
answer-group signature (group sizes, which are correct, how many gave none).
"""

from __future__ import annotations

import hashlib
import itertools
from functools import lru_cache
from math import comb, prod

import numpy as np

_SAMPLES = 512  # random subsets of a sampled majority@k
_VECTOR_LIMIT = 100_000  # at most this many answer-count vectors: majority@k is exact
ALL = "*"  # the group of every teacher's candidates together


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


def majority_block(codes: np.ndarray, correct: np.ndarray, ks: list[int], seed_texts) -> np.ndarray:
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
