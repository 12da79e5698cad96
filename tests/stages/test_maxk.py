import itertools
from math import comb

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bonforge.schema import MAXK_WEIGHTS
from bonforge.stages.maxk import gradient_weights, maxk_table, maxk_weights
from bonforge.selection.metrics import max_at_k


def brute_weights(rewards, k):
    """Enumerate every k-subset; its maximum's credit of 1 is split evenly among tied maxima."""
    credit = [0.0] * len(rewards)
    subsets = list(itertools.combinations(range(len(rewards)), k))
    for s in subsets:
        top = max(rewards[i] for i in s)
        winners = [i for i in s if rewards[i] == top]
        for i in winners:
            credit[i] += 1 / len(winners)
    return np.array(credit) / len(subsets)


# few distinct values, so that ties are common
rewards_st = st.lists(st.sampled_from([0.0, 0.25, 0.5, 1 / 3, 0.75, 1.0]) | st.floats(0, 1), min_size=1, max_size=9)


@settings(max_examples=300, deadline=None)
@given(rewards_st, st.data())
def test_weights_match_brute_force(rewards, data):
    k = data.draw(st.integers(1, len(rewards)))
    w = maxk_weights(rewards, k)
    np.testing.assert_allclose(w, brute_weights(rewards, k), rtol=0, atol=1e-12)
    assert w.sum() == pytest.approx(1.0)
    assert float(np.dot(w, rewards)) == pytest.approx(max_at_k(np.array(rewards), k))


def brute_gradient(rewards, k):
    """Every k-subset credits its maximum reward to each of its members."""
    credit = [0.0] * len(rewards)
    subsets = list(itertools.combinations(range(len(rewards)), k))
    for s in subsets:
        for i in s:
            credit[i] += max(rewards[j] for j in s)
    return np.array(credit) / len(subsets)


@settings(max_examples=300, deadline=None)
@given(rewards_st, st.data())
def test_gradient_weights_match_brute_force(rewards, data):
    k = data.draw(st.integers(1, len(rewards)))
    g = gradient_weights(rewards, k)
    np.testing.assert_allclose(g, brute_gradient(rewards, k), rtol=0, atol=1e-12)
    # every subset is counted k times, once per member
    assert g.sum() == pytest.approx(k * max_at_k(np.array(rewards), k))


@settings(max_examples=100, deadline=None)
@given(rewards_st, st.data())
def test_weights_follow_the_candidates_not_the_row_order(rewards, data):
    k = data.draw(st.integers(1, len(rewards)))
    perm = data.draw(st.permutations(range(len(rewards))))
    w = maxk_weights(rewards, k)
    np.testing.assert_allclose(maxk_weights([rewards[i] for i in perm], k), w[list(perm)], atol=1e-12)
    g = gradient_weights(rewards, k)
    np.testing.assert_allclose(gradient_weights([rewards[i] for i in perm], k), g[list(perm)], atol=1e-12)


def test_known_cases():
    # distinct rewards: the i-th smallest wins C(i, k-1) of C(n, k) subsets
    np.testing.assert_allclose(maxk_weights([0.9, 0.1, 0.5, 0.3], 2), [3 / 6, 0, 2 / 6, 1 / 6])
    np.testing.assert_allclose(maxk_weights([0.2, 0.7], 1), [0.5, 0.5])  # k=1: uniform
    np.testing.assert_allclose(maxk_weights([0.2, 0.7, 0.4], 3), [0, 1, 0])  # k=n: the best takes all
    # a tie at the top shares the block's weight: ranks 2 and 3 of 4 at k=2 hold 2/6 + 3/6
    np.testing.assert_allclose(maxk_weights([1.0, 0.0, 1.0, 0.5], 2), [5 / 12, 0, 5 / 12, 1 / 6])
    np.testing.assert_allclose(maxk_weights([0.3] * 5, 3), [0.2] * 5)
    # k=1: the plain policy gradient, r_i / n; k=n: every sample carries the best reward
    np.testing.assert_allclose(gradient_weights([0.2, 0.7], 1), [0.1, 0.35])
    np.testing.assert_allclose(gradient_weights([0.2, 0.7, 0.4], 3), [0.7, 0.7, 0.7])


def test_large_group_stays_finite():
    w = maxk_weights(np.linspace(0, 1, 200), 64)
    assert np.isfinite(w).all() and w.sum() == pytest.approx(1.0) and w[-1] == pytest.approx(64 / 200)
    assert comb(199, 63) / comb(200, 64) == pytest.approx(w[-1])


def test_k_out_of_range_is_an_error():
    for f in (maxk_weights, gradient_weights):
        with pytest.raises(ValueError, match=r"k=4 must be between 1 and the number of candidates \(3\)"):
            f([0.1, 0.2, 0.3], 4)


def verdicts():
    rows = [("p1", "a", 0.0), ("p1", "a", 1.0), ("p1", "b", 0.5), ("p1", "b", 0.5), ("p2", "a", 0.2)]
    return pa.table({"problem_id": [r[0] for r in rows], "teacher": [r[1] for r in rows],
                     "candidate_id": [f"{p}/{t}/{i}" for i, (p, t, _) in enumerate(rows)],
                     "reward": [r[2] for r in rows]})


def test_table_per_teacher_and_pooled():
    per = maxk_table(verdicts(), None, pool=False)
    assert per.schema == MAXK_WEIGHTS
    got = {(r["candidate_id"], r["k"]): r["weight"] for r in per.to_pylist()}
    assert got == {("p1/a/0", 1): 0.5, ("p1/a/1", 1): 0.5, ("p1/a/0", 2): 0.0, ("p1/a/1", 2): 1.0,
                   ("p1/b/2", 1): 0.5, ("p1/b/3", 1): 0.5, ("p1/b/2", 2): 0.5, ("p1/b/3", 2): 0.5,
                   ("p2/a/4", 1): 1.0}
    assert set(per.column("group").to_pylist()) == {"a", "b"}
    pooled = maxk_table(verdicts(), [2, 3], pool=True)
    assert set(pooled.column("group").to_pylist()) == {"*"}
    k3 = {r["candidate_id"]: r["weight"] for r in pooled.to_pylist() if r["k"] == 3}
    np.testing.assert_allclose([k3[f"p1/{t}/{i}"] for t, i in (("a", 0), ("a", 1), ("b", 2), ("b", 3))],
                               brute_weights([0.0, 1.0, 0.5, 0.5], 3))
    g3 = {r["candidate_id"]: r["gradient_weight"] for r in pooled.to_pylist() if r["k"] == 3}
    np.testing.assert_allclose([g3[f"p1/{t}/{i}"] for t, i in (("a", 0), ("a", 1), ("b", 2), ("b", 3))],
                               brute_gradient([0.0, 1.0, 0.5, 0.5], 3))
    assert not [r for r in pooled.to_pylist() if r["problem_id"] == "p2"]  # one candidate: no k >= 2


def test_a_verdict_without_a_label_is_no_sample():
    """An infra_error (or sandbox_error) verdict's reward 0 is the machine's, not the candidate's: it takes no
    weight and moves no other candidate's (its group is as if it were not drawn). Control: a timeout is a
    sample like any wrong answer."""
    t = verdicts().append_column("status", pa.array(["wrong_answer", "passed", "passed", "infra_error", "timeout"]))
    got = {(r["candidate_id"], r["k"]): r["weight"] for r in maxk_table(t, None, pool=False).to_pylist()}
    assert got == {("p1/a/0", 1): 0.5, ("p1/a/1", 1): 0.5, ("p1/a/0", 2): 0.0, ("p1/a/1", 2): 1.0,
                   ("p1/b/2", 1): 1.0, ("p2/a/4", 1): 1.0}
    sandbox = t.set_column(4, "status", pa.array(["sandbox_error"] * 5))
    assert maxk_table(sandbox, None, pool=True).num_rows == 0
