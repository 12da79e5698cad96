"""Stage `maxk_weights`: per group of candidates (a problem's samples of one teacher, or of all teachers
together), the on-policy best-of-k weight of every candidate for each k.

A candidate's weight is the share of the C(n, k) size-k subsets of its group in which it is the maximum
reward: sorted ascending, the i-th smallest (0-based) is the maximum of C(i, k−1) subsets
(``metrics.rank_weights``). Weights sum to 1 per group and k, and Σ weight · reward = max@k (the unbiased
estimate of the expected best-of-k reward from n ≥ k samples).

Ties: a subset whose maximum is shared by t tied candidates credits each of them 1/t. Every candidate of
a tie block then gets the block's mean rank weight — deterministic, independent of row order and of
candidate ids, and Σ weight · reward still equals max@k.

``gradient_weight`` is the max@k paper's on-policy estimator for continuous rewards: the mean of max(S)
over all k-subsets S, credited to every member of S (see ``gradient_weights``); Σ gradient_weight · ∇log p
is an unbiased estimate of ∇ max@k. Ties need no rule there: a subset's maximum value does not depend on
which tied candidate attains it.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bonforge.schema import MAXK_WEIGHTS, NO_LABEL
from bonforge.stage import Node, Params, Ref, Stage
from bonforge.selection.metrics import ALL, default_ks, rank_weights

VERSION = "2"  # 2: verdicts without a label (schema.NO_LABEL) are no sample of a group


def maxk_weights(rewards, k: int) -> np.ndarray:
    """Weights in the order of ``rewards``; ``1 <= k <= len(rewards)``."""
    r = np.asarray(rewards, dtype=float)
    if not 1 <= k <= len(r):
        raise ValueError(f"k={k} must be between 1 and the number of candidates ({len(r)})")
    order = np.argsort(r, kind="stable")
    ranked = rank_weights(len(r), k)
    _, starts, counts = np.unique(r[order], return_index=True, return_counts=True)
    for s, c in zip(starts, counts):
        ranked[s:s + c] = ranked[s:s + c].mean()
    out = np.empty_like(ranked)
    out[order] = ranked
    return out


def gradient_weights(rewards, k: int) -> np.ndarray:
    """Σ over the k-subsets S holding the candidate of max(S), over C(n, k): the coefficient of its
    ∇log-probability in the unbiased estimate of ∇ E[max of k samples]. Sorted ascending (ties in any
    order: the subset's maximum value is the same), i collects its own reward from the C(i, k−1) subsets it
    tops and r_j from the C(j−1, k−2) subsets that a larger j tops."""
    r = np.asarray(rewards, dtype=float)
    n = len(r)
    if not 1 <= k <= n:
        raise ValueError(f"k={k} must be between 1 and the number of candidates ({n})")
    order = np.argsort(r, kind="stable")
    s = r[order]
    above = np.array([comb(j - 1, k - 2) if k >= 2 and j else 0 for j in range(n)], dtype=float) * s
    later = np.concatenate([np.cumsum(above[::-1])[::-1][1:], [0.0]])  # Σ_{j>i}
    out = np.empty(n)
    out[order] = s * rank_weights(n, k) + later / comb(n, k)
    return out


def maxk_table(verdicts: pa.Table, ks: list[int] | None, pool: bool) -> pa.Table:
    """MAXK_WEIGHTS rows for ``verdicts`` (columns problem_id, teacher, candidate_id, reward). Groups are
    (problem, teacher), or whole problems with ``pool`` (group ``*``); k in ``ks`` (default 1, 2, 4, ...)
    up to the group's size. A verdict without a label (a ``status`` in ``schema.NO_LABEL``: the sandbox, the
    problem or the machine failed) is no sample: its reward 0 is not the candidate's."""
    if "status" in verdicts.column_names:
        verdicts = verdicts.filter(pc.invert(pc.fill_null(pc.is_in(verdicts["status"], pa.array(NO_LABEL)), False)))
    t = verdicts.select(["problem_id", "teacher", "candidate_id", "reward"]).sort_by(
        [("problem_id", "ascending"), ("teacher", "ascending"), ("candidate_id", "ascending")])
    cols = {c: t.column(c).to_pylist() for c in t.column_names}
    groups: dict[tuple[str, str], list[int]] = {}
    for i, (pid, teacher) in enumerate(zip(cols["problem_id"], cols["teacher"])):
        groups.setdefault((pid, ALL if pool else teacher), []).append(i)
    rows: dict[str, list] = {f.name: [] for f in MAXK_WEIGHTS}
    for (pid, group), idx in groups.items():
        rewards = [cols["reward"][i] for i in idx]
        for k in [k for k in (ks or default_ks(len(idx))) if k <= len(idx)]:
            for i, w, g in zip(idx, maxk_weights(rewards, k), gradient_weights(rewards, k)):
                for name, value in (("problem_id", pid), ("group", group), ("candidate_id", cols["candidate_id"][i]),
                                    ("teacher", cols["teacher"][i]), ("k", k), ("reward", cols["reward"][i]),
                                    ("weight", float(w)), ("gradient_weight", float(g))):
                    rows[name].append(value)
    return pa.table(rows, schema=MAXK_WEIGHTS)


@dataclass(frozen=True)
class MaxkParams(Params):
    ks: list[int] | None
    pool: bool


STAGE = Stage("maxk_weights", VERSION, params=MaxkParams, schema=MAXK_WEIGHTS, compute=maxk_table, shard_rows=200_000,
              table=lambda i: i.sql(
    "SELECT problem_id, teacher, candidate_id, reward, status FROM verdicts ORDER BY problem_id, candidate_id"))


def node(verdicts: list[Ref], ks: list[int] | None, pool: bool) -> Node:
    ks = sorted(set(ks)) if ks else None
    return STAGE.bind(MaxkParams(ks, pool), {"verdicts": verdicts})
