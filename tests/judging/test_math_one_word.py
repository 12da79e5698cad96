"""One-word answers: against a gold ``yes`` (or ``no``, ``true``/``false``, ``odd``/``even``), a candidate's
answer is read as the gold is, in plain text and in sentences; a one-word reply to any one-word gold is read
as that word. Everything else keeps math-verify's extraction."""

from __future__ import annotations

import pytest

from bonforge.config import MathVerifyConfig
from bonforge.judging.math import check_answer

RIGHT = [  # (gold, candidate text): correct
    ("yes", "Yes"), ("yes", "yes."), ("yes", "The answer is yes."), ("Yes", "**Answer:** YES"),
    ("yes", "Since 7 is prime, yes, it is."), ("no", "No, there is no such number."),
    ("\\boxed{No}", "We check every case. No."), ("yes", "\\boxed{\\text{Yes}}"),
    ("yes", "There is no counterexample, so the answer is yes. No further work needed."),
    ("yes", "x = 4 satisfies it, so yes"), ("True", "true"), ("false", "The statement is False."),
    ("even", "The sum is even."), ("Alice", "alice"), ("Alice", "Alice."),
]
WRONG = [("yes", "No."), ("yes", "The answer is no."), ("no", "\\boxed{yes}"), ("true", "It is false."),
         ("Alice", "Bob"), ("4", "four")]  # fmt: skip


@pytest.mark.parametrize(("gold", "text"), RIGHT)
def test_a_one_word_answer_is_read(gold, text):
    r = check_answer(text, gold)
    assert r.status == "correct", (gold, text, r)


@pytest.mark.parametrize(("gold", "text"), WRONG)
def test_another_word_is_wrong(gold, text):
    assert check_answer(text, gold).status == "wrong_answer"


def test_a_recipe_pattern_is_read_first():
    cfg = MathVerifyConfig(patterns=[r"Final: (\w+)"])
    assert check_answer("No wait. Final: yes. Some say no.", "yes", cfg).status == "correct"
    assert check_answer("Yes it seems. Final: no", "yes", cfg).status == "wrong_answer"


def test_other_answers_keep_math_verify():
    assert check_answer("so the answer is \\boxed{\\frac{1}{2}}", "0.5").status == "correct"
    assert check_answer("The answer is 12 apples.", "12").status == "correct"
    assert check_answer("I do not know", "7").status == "no_answer"
