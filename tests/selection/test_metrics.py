"""``bonforge.selection.metrics`` against brute force over every k-subset."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bonforge.selection.metrics import default_ks, majority_at_k, max_at_k, pass_at_k
from fakes import brute_majority


def brute_pass(correct, k):
    subsets = list(itertools.combinations(correct, k))
    return sum(any(s) for s in subsets) / len(subsets)


def brute_max(rewards, k):
    subsets = list(itertools.combinations(rewards, k))
    return sum(max(s) for s in subsets) / len(subsets)



@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=10), st.data())
def test_pass_at_k_matches_brute_force(correct, data):
    k = data.draw(st.integers(1, len(correct)))
    assert abs(pass_at_k(len(correct), sum(correct), k) - brute_pass(correct, k)) < 1e-12


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=9), st.data())
def test_max_at_k_matches_brute_force(rewards, data):
    k = data.draw(st.integers(1, len(rewards)))
    assert abs(max_at_k(np.array(rewards), k) - brute_max(rewards, k)) < 1e-9


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["1", "2", "3", None]), min_size=1, max_size=8), st.data())
def test_majority_at_k_matches_brute_force_with_ties_split(answers, data):
    correct = [a == "1" for a in answers]
    k = data.draw(st.integers(1, len(answers)))
    got = majority_at_k(answers, correct, k, "p")
    if all(a is None for a in answers):
        assert got is None
    else:
        assert abs(got - brute_majority(answers, correct, k)) < 1e-9


def test_majority_sampling_is_deterministic_for_large_n():
    answers = [str(i % 5) for i in range(24)]
    correct = [a == "0" for a in answers]
    a = majority_at_k(answers, correct, 8, "p1")
    assert a == majority_at_k(answers, correct, 8, "p1")
    assert 0.0 < a < 1.0


def test_default_ks_are_powers_of_two_up_to_n():
    assert default_ks(1) == [1]
    assert default_ks(16) == [1, 2, 4, 8, 16]
    assert default_ks(6) == [1, 2, 4]

def test_majority_sampling_is_close_to_brute_force():
    """512 random subsets estimate majority@k within sampling error (C(14, 7) = 3432 subsets exactly)."""
    answers = ["1", "1", "1", "2", "2", "3", None, "4", "4", "4", "4", "5", None, "1"]
    correct = [a == "1" for a in answers]
    exact = brute_majority(answers, correct, 7)
    assert abs(majority_at_k(answers, correct, 7, "p") - exact) < 0.06
