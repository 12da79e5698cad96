"""Stage `problem_stats`: per problem, overall (teacher ``*``) and per teacher — n, n_correct, pass rate,
unbiased pass@k, majority@k, max@k, the test-suite strength (code: the share of candidates labelled wrong that
the tests reject) — and the keep/drop decision of the recipe's filter.

k in 1, 2, 4, ... <= n unless the recipe lists ks; the definitions are in ``bonforge.selection.metrics``.

The stage streams its input (``Stage.stream``): shards of whole problems as they are read. It works on
whole shards at once: groups of equal size are scored as matrices, and majority@k is
computed once per distinct answer-group signature (group sizes, which are correct, how many gave none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bonforge.judging.strength import SAYS_NOTHING
from bonforge.selection.metrics import ALL, default_ks, majority_block, pass_at_k, rank_weights
from bonforge.config import FilterConfig, Recipe, ScoreConfig
from bonforge.tables.ordering import sort_by
from bonforge.schema import PROBLEM_STATS, DropReason
from bonforge.stage import Inputs, Node, Params, Ref, Stage

VERSION = "5"  # 5: test-suite strength (n_known_wrong, suite_strength) from the candidates' labels, read beside
# the verdicts (a new input), and filter.min_suite_strength.
# 4: drop_reason is a DropReason code, not a sentence with the numbers inside (3: exact majority@k)


def drop_reason(n: int, rate: float, cfg: FilterConfig, strength: float | None = None) -> DropReason | None:
    if cfg.min_suite_strength is not None and strength is not None and strength < cfg.min_suite_strength:
        return DropReason.WEAK_TESTS
    if n < cfg.min_candidates:
        return DropReason.TOO_FEW_CANDIDATES
    if rate <= cfg.min_pass_rate:
        return DropReason.TOO_HARD
    if rate > cfg.max_pass_rate:
        return DropReason.TOO_EASY
    return None


def _ks(n: int, ks_cfg: list[int] | None) -> list[int]:
    return [k for k in (ks_cfg or default_ks(n)) if k <= n]


def _kmap(values: np.ndarray, ks: list[int], mask: np.ndarray | None = None) -> pa.MapArray:
    g = len(values)
    return pa.MapArray.from_arrays(pa.array(np.arange(g + 1, dtype=np.int32) * len(ks)),
                                   pa.array(np.tile(np.array(ks, dtype=np.int32), g)),
                                   pa.array(values.ravel(), pa.float64()), type=PROBLEM_STATS.field("pass_at_k").type,
                                   mask=None if mask is None else pa.array(mask))


_SAYS_NOTHING = pa.array(SAYS_NOTHING)


def _known_wrong(t: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(labelled wrong and judged on the tests, and of those rejected) per verdict row: the candidates whose
    ``reference_correct`` is false measure the suite (``bonforge.judging.strength``)."""
    if "reference_correct" not in t.column_names:
        return np.zeros(t.num_rows, bool), np.zeros(t.num_rows, bool)
    wrong = pc.fill_null(pc.and_(pc.equal(t.column("reference_correct"), False),
                                 pc.invert(pc.is_in(t.column("status"), value_set=_SAYS_NOTHING))), False)
    wrong = wrong.to_numpy(zero_copy_only=False).astype(bool)
    return wrong, wrong & ~t.column("correct").to_numpy(zero_copy_only=False).astype(bool)


def score(verdicts: pa.Table, score_cfg: ScoreConfig, filter_cfg: FilterConfig) -> pa.Table:
    """PROBLEM_STATS rows for every problem of ``verdicts`` (a shard of whole problems; with the candidates'
    ``reference_correct`` where known): per problem the overall row (teacher ``*``), then one per teacher,
    in problem and teacher order."""
    cols = ["problem_id", "teacher", "candidate_id", "correct", "reward", "extracted"]
    cols += [c for c in ("status", "reference_correct") if c in verdicts.column_names]
    t = sort_by(verdicts.select(cols), ["problem_id", "teacher", "candidate_id"])
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
    wrong, caught = (np.r_[0, np.cumsum(x)] for x in _known_wrong(t))
    n_wrong, n_caught = wrong[start + length] - wrong[start], caught[start + length] - caught[start]
    strength = np.where(n_wrong > 0, n_caught / np.maximum(n_wrong, 1), np.nan)
    reasons = np.array([(r := drop_reason(n, c / n, filter_cfg, None if np.isnan(s) else s)) and r.value
                        for n, c, s in zip(length[overall].tolist(), n_correct[overall].tolist(),
                                           strength[overall].tolist())], dtype=object)  # fmt: skip

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
        maj = majority_block(answer[idx], ok, ks, seeds)
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
            "n_known_wrong": pa.array(n_wrong[seg].astype(np.int32)),
            "suite_strength": pa.array(strength[seg], from_pandas=True),
        }, schema=PROBLEM_STATS))
        positions.append(seg)
    out = pa.concat_tables(blocks)
    return out.take(pa.array(np.argsort(np.concatenate(positions), kind="stable")))


_COLUMNS = ["problem_id", "teacher", "candidate_id", "correct", "reward", "extracted", "status"]
_LABELS = ["problem_id", "candidate_id", "reference_correct"]


def _verdicts(i: Inputs) -> Iterator[pa.Table]:
    """Every teacher's verdicts, in chunks of whole problems (streamed: never the whole table at once), with
    each candidate's published label (``reference_correct``) where the candidates are an input."""
    labels = "candidates" in i
    with i.aligned({"verdicts": _COLUMNS, **({"candidates": _LABELS} if labels else {})}) as chunks:
        for chunk in chunks:
            if labels:
                yield chunk["verdicts"].join(chunk["candidates"].select(["candidate_id", "reference_correct"]),
                                             "candidate_id", join_type="left outer")
            else:
                yield chunk["verdicts"]


@dataclass(frozen=True)
class ScoreParams(Params):
    score_cfg: ScoreConfig
    filter_cfg: FilterConfig

    def key_config(self) -> dict:
        return {"score": self.score_cfg.key_config(), "filter": self.filter_cfg.key_config()}


STAGE = Stage("problem_stats", VERSION, params=ScoreParams, schema=PROBLEM_STATS, compute=score, shard_rows=200_000,
              stream=_verdicts, stream_of="verdicts")


def node(recipe: Recipe, verdicts: list[Ref], candidates: list[Ref] | None = None) -> Node:
    """``candidates``: their labels give the test-suite strength (code problems)."""
    inputs = {"verdicts": verdicts, **({"candidates": candidates} if candidates else {})}
    return STAGE.bind(ScoreParams(recipe.score, recipe.filter), inputs)


def filter_counts(i: Inputs) -> dict[str, int]:
    """Problems the filter kept (``kept``) and dropped, by reason in words ("too hard", "too easy", ...), most
    first."""
    t = i.sql("SELECT CASE WHEN keep THEN 'kept' ELSE drop_reason END AS why, count(*) AS n FROM problem_stats "
              "WHERE teacher = '*' GROUP BY why ORDER BY n DESC, why")
    return {why if why == "kept" else DropReason(why).words: n
            for why, n in zip(t.column("why").to_pylist(), t.column("n").to_pylist())}
