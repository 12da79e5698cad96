"""The rule of exact early stopping (``bonforge.stages.rounds``), over any teachers and right/wrong patterns:
a problem is closed only when a build that draws every sample drops it as too easy, a kept problem gets every
sample, and the samples drawn are exactly those drawing one at a time in the interleaved order would draw."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from bonforge.config import FilterConfig
from bonforge.schema import ROUNDS
from bonforge.stages import rounds
from bonforge.stages.problem_stats import drop_reason


def test_teachers_are_interleaved_by_share():
    assert rounds.interleaved((2, 2)) == [0, 1, 0, 1]
    assert rounds.interleaved((4, 2)) == [0, 0, 1, 0, 0, 1]  # b's samples at 1/2 and 2/2 of a's
    assert rounds.interleaved((1, 3)) == [1, 1, 0, 1]


def test_the_threshold_is_the_filters_own_test():
    cfg = FilterConfig(max_pass_rate=0.5)
    assert rounds.threshold(8, cfg) == 5  # 4 of 8 is kept (<= 0.5), 5 of 8 is too easy
    assert rounds.threshold(7, cfg) == 4
    assert rounds.threshold(1, cfg) is None  # fewer than min_candidates: dropped as too few, never stopped
    assert rounds.threshold(8, FilterConfig(min_pass_rate=0.0, max_pass_rate=1.0)) is None


def simulate(patterns: list[list[bool]], cfg: FilterConfig) -> tuple[list[int], bool, int]:
    """The rounds over one problem whose teacher ``t``'s sample ``k`` is right iff ``patterns[t][k]``: what each
    teacher drew, whether it stopped early, and the rounds it took."""
    caps = [len(p) for p in patterns]
    order = rounds.interleaved(tuple(caps))
    drawn, round_ = [0] * len(caps), 1
    while True:
        correct = [sum(p[:d]) for p, d in zip(patterns, drawn)]
        draws, stopped = rounds.decide(drawn, correct, caps, order, cfg, round_)
        if stopped or draws == drawn:
            return drawn, stopped, round_
        drawn, round_ = draws, round_ + 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=1, max_size=12), min_size=1, max_size=3),
       st.sampled_from([0.25, 0.5, 0.75]), st.integers(1, 4))
def test_rounds_are_exact_and_stop_where_one_at_a_time_would(patterns, max_pass_rate, min_candidates):
    cfg = FilterConfig(max_pass_rate=max_pass_rate, min_candidates=min_candidates)
    drawn, stopped, taken = simulate(patterns, cfg)
    total = sum(map(len, patterns))
    full = drop_reason(total, sum(map(sum, patterns)) / total, cfg)
    if stopped:
        assert full is not None and full.value == "too_easy"
    else:
        assert drawn == [len(p) for p in patterns]  # not stopped: every sample, as without early stop
    # one at a time in the interleaved order: the first prefix with more than max_pass_rate x total right
    order, seen, ok, stop = rounds.interleaved(tuple(map(len, patterns))), [0] * len(patterns), 0, total
    for k, t in enumerate(order):
        ok += patterns[t][seen[t]]
        seen[t] += 1
        if total >= min_candidates and ok / total > max_pass_rate:
            stop = k + 1
            break
    if taken < rounds.MAX_ROUNDS:
        assert sum(drawn) == stop


def test_a_teacher_the_engine_skipped_draws_no_more():
    state = pa.table({"problem_id": ["p", "p"], "teacher": ["a", "b"], "n": [4, 0], "drawn": [2, 0],
                      "correct": [2, 0], "stopped_early": [False, False]})
    out = rounds.plan(state, (("a", 4), ("b", 4)), FilterConfig(max_pass_rate=0.5), 2)
    assert out.schema == ROUNDS
    # b got nothing (its prompt skipped): of the 4 samples left, 3 right make it too easy; a draws one more
    assert out.column("draws").to_pylist() == [3, 0]
