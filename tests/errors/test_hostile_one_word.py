"""Hostile answers to yes/no-style questions: no text scores against both words of a pair (a hedge such as
"yes or no", "Yes/No", a box holding both, both in the last sentence is `no_answer`), texts that name neither
are `no_answer`, and a long degenerate text is judged in linear time."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bonforge.judging.math import check_answer

PAIRS = [("yes", "no"), ("true", "false"), ("odd", "even")]
HEDGES = ["yes or no", "Yes/No", "\\boxed{yes \\text{ or } no}", "The answer is yes, or no.", "YES NO",
          "The answer: yes and no", "Maybe. yes-no", "\\boxed{\\text{Yes/No}}",
          "There is no doubt: the answer is no or yes."]  # fmt: skip


@pytest.mark.parametrize("text", HEDGES)
def test_a_hedge_is_no_answer(text):
    """Both words named (``yes or no``): no answer, saying so. Written as one token (``Yes/No``, ``yes-no``) or
    boxed with more than the word, neither is stated (the one-word rule: a word touched by other signs, or a box
    that holds more than the word): no answer, or a wrong one. Never right against either gold."""
    for gold in ("yes", "no", "Yes", "\\boxed{No}"):
        r = check_answer(text, gold)
        assert r.status in ("no_answer", "wrong_answer"), (text, gold, r)
        if r.status == "no_answer" and "/" not in text and "-" not in text:
            assert "both" in r.detail, (text, gold, r)


@pytest.mark.parametrize("text", ["", "maybe", "It depends.", "\\boxed{}", "yesterday nothing happened", "nobody"])
def test_no_word_of_the_pair_is_no_answer(text):
    assert check_answer(text, "yes").status == "no_answer"
    assert check_answer(text, "no").status == "no_answer"


WORDS = st.sampled_from(["yes", "no", "Yes", "NO", "true", "false", "odd", "even", "or", "and", "answer", "is",
                         "the", "\\boxed{", "}", ".", "!", "?", ";", "\n", ",", "/", "4", "not", "Final:"])  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(WORDS, max_size=20).map(" ".join))
def test_no_text_is_right_against_both_words_of_a_pair(text):
    for a, b in PAIRS:
        assert not (check_answer(text, a).correct and check_answer(text, b).correct), (text, a, b)


@pytest.mark.parametrize("unit", ["no ", "yes. ", "\\boxed{", "answer ", "y" * 50 + " "])
def test_a_long_degenerate_text_is_judged_quickly(unit):
    text = unit * (400_000 // len(unit))
    t0 = time.perf_counter()
    check_answer(text, "yes", timeout=30)
    assert time.perf_counter() - t0 < 5
