"""Stage `problem_stats`: per problem, overall (teacher ``*``) and per teacher — n, n_correct, pass rate,
unbiased pass@k, majority@k, max@k, the test-suite strength (code: the share of candidates labelled wrong that
the tests reject) — and the keep/drop decision of the recipe's filter.

With ``problems.include_reference`` the reference solutions are a teacher of their own (``reference``): they
get their own row, and the overall row (the one the filter reads) leaves them out unless
``filter.count_reference``: the filter is on the model's pass rate.

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

from bonforge.selection.metrics import ALL, default_ks, majority_block, pass_at_k, rank_weights
from bonforge.config import FilterConfig, Recipe, ScoreConfig
from bonforge.tables.ordering import sort_by
from bonforge.schema import NO_LABEL, PROBLEM_STATS, REFERENCE_TEACHER, DropReason
from bonforge.stage import Inputs, Node, Params, Ref, Stage

# 6: test-suite strength (n_known_wrong, suite_strength) from the candidates' labels, read beside the verdicts (a
# new input), and filter.min_suite_strength.
# 5: drop_detail (the numbers against the filter's bound); the overall row leaves the reference solutions out;
# stopped_early and n_planned (filter.early_stop). 4: drop_reason is a DropReason code, not a sentence with the
# numbers inside (3: exact majority@k)
# 7: verdicts without a label (schema.NO_LABEL: sandbox_error, infra_error) count nowhere.
VERSION = "7"


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


def drop_detail(reason: DropReason, n: int, rate: float, cfg: FilterConfig, strength: float | None = None) -> str:
    """The sentence beside ``reason``: the problem's numbers against the filter's bound."""
    if reason is DropReason.WEAK_TESTS:
        return f"suite strength {strength:.3f} < min_suite_strength {cfg.min_suite_strength:g}"
    if reason is DropReason.TOO_FEW_CANDIDATES:
        return f"{n} candidates < min_candidates {cfg.min_candidates}"
    if reason is DropReason.TOO_HARD:
        return f"pass rate {rate:.3f} <= min_pass_rate {cfg.min_pass_rate:g} ({round(rate * n)} of {n})"
    return f"pass rate {rate:.3f} > max_pass_rate {cfg.max_pass_rate:g} ({round(rate * n)} of {n})"


def _ks(n: int, ks_cfg: list[int] | None) -> list[int]:
    return [k for k in (ks_cfg or default_ks(n)) if k <= n]


def _kmap(values: np.ndarray, ks: list[int], mask: np.ndarray | None = None) -> pa.MapArray:
    g = len(values)
    return pa.MapArray.from_arrays(pa.array(np.arange(g + 1, dtype=np.int32) * len(ks)),
                                   pa.array(np.tile(np.array(ks, dtype=np.int32), g)),
                                   pa.array(values.ravel(), pa.float64()), type=PROBLEM_STATS.field("pass_at_k").type,
                                   mask=None if mask is None else pa.array(mask))


# Verdicts of a known-wrong solution that say nothing about the tests: the program never ran (a solution that
# does not build here), or the problem's own check failed.
_SAYS_NOTHING = pa.array(["compile_error", *NO_LABEL])


def _known_wrong(t: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(labelled wrong and judged on the tests, and of those rejected) per verdict row: the candidates whose
    ``reference_correct`` is false (CodeContests' ``incorrect_solutions``; a problem package's ``fail`` and
    ``tle`` solutions: a suite that times out a too-slow one holds inputs large enough) measure the suite."""
    if "reference_correct" not in t.column_names:
        return np.zeros(t.num_rows, bool), np.zeros(t.num_rows, bool)
    wrong = pc.fill_null(pc.and_(pc.equal(t.column("reference_correct"), False),
                                 pc.invert(pc.is_in(t.column("status"), value_set=_SAYS_NOTHING))), False)
    wrong = wrong.to_numpy(zero_copy_only=False).astype(bool)
    return wrong, wrong & ~t.column("correct").to_numpy(zero_copy_only=False).astype(bool)


def score(verdicts: pa.Table, score_cfg: ScoreConfig, filter_cfg: FilterConfig,
          reference: str | None = None) -> pa.Table:
    """PROBLEM_STATS rows for every problem of ``verdicts`` (a shard of whole problems): per problem the
    overall row (teacher ``*``), then one per teacher, in problem and teacher order (``reference`` last).
    ``reference``: a teacher whose candidates the overall row leaves out (it keeps its own row). With the
    candidates' ``reference_correct`` (and the verdicts' ``status``), the test-suite strength. A verdict that
    is no label (``schema.NO_LABEL``: the sandbox, the problem or the machine failed) counts nowhere: a
    problem with no other gets its overall row only, with ``n`` 0, dropped as having too few candidates."""
    if "status" not in verdicts.column_names:
        return _score(verdicts, score_cfg, filter_cfg, reference)
    unlabelled = pc.fill_null(pc.is_in(verdicts.column("status"), value_set=pa.array(NO_LABEL)), False)
    if not pc.any(unlabelled).as_py():
        return _score(verdicts, score_cfg, filter_cfg, reference)
    labelled = verdicts.filter(pc.invert(unlabelled))
    out = _score(labelled, score_cfg, filter_cfg, reference)
    gone = sorted(set(verdicts.filter(unlabelled).column("problem_id").to_pylist())
                  - set(labelled.column("problem_id").to_pylist()))  # fmt: skip
    if not gone:
        return out
    detail = drop_detail(DropReason.TOO_FEW_CANDIDATES, 0, 0.0, filter_cfg) + " (every verdict without a label)"
    empty = pa.array([[]] * len(gone), PROBLEM_STATS.field("pass_at_k").type)
    ghosts = pa.table({
        "problem_id": gone, "teacher": [ALL] * len(gone), "n": [0] * len(gone), "n_correct": [0] * len(gone),
        "pass_rate": [0.0] * len(gone), "mean_reward": [0.0] * len(gone), "pass_at_k": empty,
        "majority_at_k": pa.nulls(len(gone), empty.type), "max_at_k": empty, "keep": [False] * len(gone),
        "drop_reason": [DropReason.TOO_FEW_CANDIDATES.value] * len(gone), "drop_detail": [detail] * len(gone),
        "stopped_early": [False] * len(gone), "n_planned": pa.nulls(len(gone), pa.int32()),
        "n_known_wrong": [0] * len(gone), "suite_strength": pa.nulls(len(gone), pa.float64()),
    }, schema=PROBLEM_STATS)  # fmt: skip
    both = pa.concat_tables([out, ghosts])
    return both.take(pc.sort_indices(both, [("problem_id", "ascending")]))


def _score(verdicts: pa.Table, score_cfg: ScoreConfig, filter_cfg: FilterConfig, reference: str | None) -> pa.Table:
    early = [c for c in _EARLY if c in verdicts.column_names]  # with filter.early_stop (``_verdicts``)
    labels = [c for c in ("status", "reference_correct") if c in verdicts.column_names]
    t = verdicts.select(["problem_id", "teacher", "candidate_id", "correct", "reward", "extracted", *early, *labels])
    aside = pc.equal(t.column("teacher"), reference or "").combine_chunks() if reference else pa.array([], pa.bool_())
    t = sort_by(t.append_column("aside", aside) if reference else t,
                ["problem_id"] + (["aside"] if reference else []) + ["teacher", "candidate_id"])
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
    p_length = np.diff(np.r_[p_start, len(t)])
    if reference:  # the teacher set aside sorts last in its problem: the overall row stops before it
        kept = np.r_[0, np.cumsum(~t.column("aside").to_numpy(zero_copy_only=False).astype(bool))]
        p_length = kept[p_start + p_length] - kept[p_start]
    length = np.r_[p_length, np.diff(np.r_[t_start, len(t)])]
    problem = np.searchsorted(p_start, start, side="right") - 1
    overall = np.r_[np.ones(len(p_start), bool), np.zeros(len(t_start), bool)]
    order = np.lexsort((start, ~overall, problem))
    start, length, problem, overall = start[order], length[order], problem[order], overall[order]

    c_sum = np.r_[0, np.cumsum(correct)]
    n_correct = c_sum[start + length] - c_sum[start]
    wrong, caught = (np.r_[0, np.cumsum(x)] for x in _known_wrong(t))
    n_wrong, n_caught = wrong[start + length] - wrong[start], caught[start + length] - caught[start]
    strength = np.where(n_wrong > 0, n_caught / np.maximum(n_wrong, 1), np.nan)
    drawn = length[overall]
    if early:  # per problem; a stopped problem is judged on the samples a full build draws: too easy
        stopped = t.column("stopped_early").to_numpy(zero_copy_only=False).astype(bool)[p_start]
        planned = t.column("n_planned").to_numpy(zero_copy_only=False).astype(np.int64)[p_start]
    else:
        stopped, planned = np.zeros(len(p_start), bool), drawn
    suites = [None if np.isnan(x) else x for x in strength[overall].tolist()]
    whys = [(drop_reason(n, c / d if d else 0.0, filter_cfg, x), d, c / d if d else 0.0, x) for n, c, d, x in
            zip(np.where(stopped, planned, drawn).tolist(), n_correct[overall].tolist(), drawn.tolist(), suites)]
    reasons = np.array([r and r.value for r, _, _, _ in whys], dtype=object)
    details = np.array([r and drop_detail(r, d, rate, filter_cfg, x) for r, d, rate, x in whys], dtype=object)

    blocks, positions = [], []
    for n in np.unique(length).tolist():
        seg = np.flatnonzero(length == n)
        idx = start[seg, None] + np.arange(n)
        ks = _ks(n, score_cfg.ks)
        ok, rw = correct[idx], rewards[idx]
        c = ok.sum(axis=1)
        rate = c / n if n else np.zeros(len(seg))  # n = 0: a problem with only the candidates set aside
        pass_table = np.array([[pass_at_k(n, ci, k) for k in ks] for ci in range(n + 1)]).reshape(n + 1, len(ks))
        weights = np.column_stack([rank_weights(n, k) for k in ks]) if ks else np.zeros((n, 0))
        first = pa.array(start[seg])
        teacher = pc.if_else(pa.array(overall[seg]), ALL, t.column("teacher").take(first))
        seeds = lambda r, first=first, teacher=teacher: (  # noqa: E731  (only where majority@k is sampled)
            f"{t.column('problem_id')[first[r].as_py()]}/{teacher[r]}")
        maj = majority_block(answer[idx], ok, ks, seeds) if ks else np.zeros((len(seg), 0))
        no_answers = np.isnan(maj[:, 0]) if ks else np.ones(len(seg), bool)
        reason = reasons[problem[seg]]
        blocks.append(pa.table({
            "problem_id": t.column("problem_id").take(first),
            "teacher": teacher,
            "n": pa.array(np.full(len(seg), n, dtype=np.int32)),
            "n_correct": pa.array(c.astype(np.int32)),
            "pass_rate": pa.array(rate),
            "mean_reward": pa.array(rw.mean(axis=1) if n else rate),
            "pass_at_k": _kmap(pass_table[c], ks),
            "majority_at_k": _kmap(np.where(no_answers[:, None], 0.0, maj), ks, no_answers),
            "max_at_k": _kmap(np.sort(rw, axis=1) @ weights, ks),
            "keep": pa.array(reason == None),  # noqa: E711  (elementwise)
            "drop_reason": pa.array(reason, pa.string()),
            "drop_detail": pa.array(details[problem[seg]], pa.string()),
            "stopped_early": pa.array(stopped[problem[seg]]),
            "n_planned": pa.array(planned[problem[seg]], pa.int32(), mask=None if early else np.ones(len(seg), bool)),
            "n_known_wrong": pa.array(n_wrong[seg].astype(np.int32)),
            "suite_strength": pa.array(strength[seg], from_pandas=True),
        }, schema=PROBLEM_STATS))
        positions.append(seg)
    out = pa.concat_tables(blocks)
    return out.take(pa.array(np.argsort(np.concatenate(positions), kind="stable")))


_COLUMNS = ["problem_id", "teacher", "candidate_id", "correct", "reward", "extracted", "status"]
_EARLY = ["stopped_early", "n_planned"]
_LABELS = ["problem_id", "candidate_id", "reference_correct"]


def _verdicts(i: Inputs) -> Iterator[pa.Table]:
    """Every teacher's verdicts, in chunks of whole problems (streamed: never the whole table at once); with
    early stopping each row also carries its problem's ``stopped_early`` and ``n_planned`` (the samples a build
    without early stop draws), from the last round's table; with the candidates as an input, each candidate's
    published label (``reference_correct``: the test-suite strength)."""
    early, labels = "rounds" in i, "candidates" in i
    columns = {"verdicts": _COLUMNS, **({"rounds": ["problem_id", "n", "stopped_early"]} if early else {}),
               **({"candidates": _LABELS} if labels else {})}
    with i.aligned(columns) as chunks:
        for chunk in chunks:
            verdicts = chunk["verdicts"]
            if labels:
                verdicts = verdicts.join(chunk["candidates"].select(["candidate_id", "reference_correct"]),
                                         "candidate_id", join_type="left outer")
            if not early:
                yield verdicts
                continue
            per_problem = chunk["rounds"].group_by("problem_id").aggregate([("n", "sum"), ("stopped_early", "max")])
            per_problem = pa.table({"problem_id": per_problem.column("problem_id"),
                                    "n_planned": per_problem.column("n_sum").cast(pa.int32()),
                                    "stopped_early": per_problem.column("stopped_early_max")})
            yield verdicts.join(per_problem, "problem_id")


@dataclass(frozen=True)
class ScoreParams(Params):
    score_cfg: ScoreConfig
    filter_cfg: FilterConfig
    reference: str | None = None  # the teacher the overall row leaves out

    def key_config(self) -> dict:
        # count_reference acts through ``reference`` alone (without references it changes nothing)
        filt = {k: v for k, v in self.filter_cfg.key_config().items() if k != "count_reference"}
        out = {"score": self.score_cfg.key_config(), "filter": filt}
        return {**out, "reference": self.reference} if self.reference else out


STAGE = Stage("problem_stats", VERSION, params=ScoreParams, schema=PROBLEM_STATS, compute=score, shard_rows=200_000,
              stream=_verdicts, stream_of="verdicts")


def node(recipe: Recipe, verdicts: list[Ref], rounds: Ref | None = None, candidates: list[Ref] | None = None) -> Node:
    """``rounds``: the last round's table of early stopping (``bonforge.stages.rounds``); ``candidates``: their
    labels give the test-suite strength (code problems)."""
    aside = recipe.problems.include_reference and not recipe.filter.count_reference
    inputs = {"verdicts": verdicts, "rounds": rounds, **({"candidates": candidates} if candidates else {})}
    return STAGE.bind(ScoreParams(recipe.score, recipe.filter, REFERENCE_TEACHER if aside else None), inputs)


def filter_counts(i: Inputs) -> dict[str, int]:
    """Problems the filter kept (``kept``) and dropped, by reason in words ("too hard", "too easy", ...), most
    first."""
    t = i.sql("SELECT CASE WHEN keep THEN 'kept' ELSE drop_reason END AS why, count(*) AS n FROM problem_stats "
              "WHERE teacher = '*' GROUP BY why ORDER BY n DESC, why")
    return {why if why == "kept" else DropReason(why).words: n
            for why, n in zip(t.column("why").to_pylist(), t.column("n").to_pylist())}
