"""The side-by-side draws (bonforge/selection/draws.py) equal drawing each problem on its own with
random.Random's choice / sample / shuffle (assemble._draws), for every pool shape, including pools too
large for the side-by-side path, pools with repeated candidate ids and pools of few distinct draws."""

import itertools
import random

import numpy as np
import pyarrow as pa
import pytest

from bonforge.selection import draws as genselect_draws
from bonforge.config import GenSelectConfig
from bonforge.stages.assemble import _draws, _problem_draws, feasible_sizes


def _pools(rng: np.random.Generator, problems: int):
    """A sorted pool table of ``problems`` problems of 1-48 rows; which rows are eligible and correct."""
    lengths = rng.integers(1, 49, problems)
    lengths[:6] = [2, 3, 16, 16, 44, 48]  # tiny pools (few distinct draws) and pools past 21 of a kind
    pid = np.repeat([f"p{g:04d}" for g in range(problems)], lengths)
    cid = [f"{p}/c{i:02d}" for p, n in zip(sorted(set(pid)), lengths) for i in range(n)]
    cid[3] = cid[2]  # a repeated candidate id within a problem
    t = pa.table({"problem_id": pid.tolist(), "candidate_id": cid})
    ok = rng.random(len(pid)) < 0.9
    correct = rng.random(len(pid)) < np.repeat(rng.random(problems), lengths)
    first = np.r_[0, np.cumsum(lengths)[:-1]]
    return t, ok, correct, first, lengths


@pytest.mark.parametrize("cfg", [GenSelectConfig(), GenSelectConfig(min_candidates=3, max_candidates=8,
                                                                    prompts_per_problem=6, max_correct_fraction=0.75)])
@pytest.mark.parametrize("words", [192, 8])  # 8: each stream is drawn from its generator again and again
def test_side_by_side_draws_equal_drawing_one_problem_at_a_time(cfg, words, monkeypatch):
    monkeypatch.setattr(genselect_draws, "_WORDS", words)
    t, ok, correct, first, length = _pools(np.random.default_rng(5), 400)
    draws = _problem_draws(t, first, length, ok, correct, cfg, seed=11)
    ids = t.column("candidate_id").to_pylist()
    names = t.column("problem_id").to_pylist()
    expected = {}
    for g, (lo, n) in enumerate(zip(first.tolist(), length.tolist())):
        rows = np.flatnonzero(ok[lo:lo + n]) + lo
        good, bad = rows[correct[rows]].tolist(), rows[~correct[rows]].tolist()
        if feasible_sizes(len(good), len(bad), cfg):
            expected[g] = list(_draws(random.Random(f"11/{names[lo]}"), good, bad, ids, cfg))
    assert list(draws) == list(expected)
    assert len(expected) > 300
    # taken as the rounds take them: the first draws, then more of some problems
    want = cfg.prompts_per_problem
    got = {g: list(itertools.islice(d, want)) for g, d in draws.items()}
    got = {g: got[g] + (list(draws[g]) if g % 3 == 0 else []) for g in got}
    assert got == {g: e if g % 3 == 0 else e[:want] for g, e in expected.items()}
