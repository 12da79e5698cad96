"""One-word answers: against a gold ``yes`` (or ``no``, ``true``/``false``, ``odd``/``even``), a candidate's
answer is read as the gold is, in plain text and in sentences; a one-word reply to any one-word gold is read
as that word. Everything else keeps math-verify's extraction."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bonforge.config import MathVerifyConfig
from bonforge.judging.math import check_answer
from bonforge.judging.math_rules import judge

CFG = MathVerifyConfig().model_dump_json()

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


def test_a_word_with_a_sign_or_operator_around_it_is_not_the_word():
    """MATH-500's perturbed answer: math-verify refuses ``-(\\text{even})`` for ``\\text{even}``, so does the
    one-word reading (it was read as "even")."""
    assert check_answer("\\boxed{-(\\text{even})}", "\\text{even}").status == "wrong_answer"
    assert check_answer("The parity is \\boxed{\\text{even}}.", "\\text{even}").status == "correct"


# A word of a closed pair written as a gold would be, placed where the one-word reading looks (a box, a
# sentence, inline maths), with a sign, an operator, a digit or a command touching it (perturbed) or with
# nothing but markup and punctuation (clean)
PAIR_WORDS = ["yes", "no", "true", "false", "odd", "even"]
WRITTEN = [lambda w: w, str.upper, str.capitalize, lambda w: f"\\text{{{w}}}", lambda w: f"\\textbf{{{w}}}",
           lambda w: f"\\mathrm{{{w}}}", lambda w: f"\\text{{ {w.capitalize()} }}"]
PLACES = [lambda x: f"\\boxed{{{x}}}", lambda x: f"We check it. The answer is {x}.", lambda x: f"So ${x}$ holds",
          lambda x: f"Final answer: {x}", lambda x: f"Thus \\( {x} \\) is the answer.\nDone"]
PREFIXES = ["-", "+", "-(", "2", "1+", "\\neg ", "\\lnot", "\\pm ", "\\sqrt{", "x*", "\\frac{1}{2}", "-\\left(",
            "|", "=", "~"]
SUFFIXES = ["^2", "+1", "-1", "2", "*3", "/2", "!", "_1", "\\cdot 3", "=0", ">0"]
CLEAN = [("", ""), ("(", ")"), ('"', '"'), ("**", "**")]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PAIR_WORDS), st.sampled_from(WRITTEN), st.sampled_from(PLACES),
       st.sampled_from([""] + PREFIXES), st.sampled_from([""] + SUFFIXES), st.sampled_from(["", "\\text{%s}"]))
def test_a_perturbed_word_is_never_read_as_the_word(word, written, place, prefix, suffix, gold_form):
    assume(prefix or suffix)
    gold = gold_form % word if gold_form else word
    status, _, _ = judge(place(prefix + written(word) + suffix), gold, CFG)
    if suffix == "!" and not prefix and "boxed" not in place(""):
        assume(False)  # "yes!" ends a sentence: the word alone
    assert status != "correct", (gold, place(prefix + written(word) + suffix))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(PAIR_WORDS), st.sampled_from(WRITTEN), st.sampled_from(PLACES), st.sampled_from(CLEAN),
       st.booleans())
def test_a_clean_word_is_read(word, written, place, around, other):
    said = _other(word) if other else word
    text = place(around[0] + written(said) + around[1])
    assume("boxed" not in text or around == ("", ""))  # a box holds the word alone
    status, extracted, _ = judge(text, word, CFG)
    assert (status, extracted) == (("wrong_answer", _other(word)) if other else ("correct", word)), text


def _other(word: str) -> str:
    a, b = next(p for p in (("yes", "no"), ("true", "false"), ("odd", "even")) if word in p)
    return b if word == a else a


@pytest.mark.parametrize("gold,text", [
    ("even", "The number is not even."), ("yes", "The answer is not yes."), ("even", "So n isn't even."),
    ("odd", "It is never odd."), ("even", "The sum is non-even."), ("true", 'The claim is not "true".'),
    ("even", "\\boxed{\\text{not even}}"), ("yes", "Neither yes."),
])
def test_a_negated_word_is_not_the_word(gold, text):
    """A pair's word after a negation is not stated: "not even" never reads as the gold ``even``."""
    assert judge(text, gold, CFG)[0] != "correct"


@pytest.mark.parametrize("gold,text", [("even", "It is not odd, so the answer is even."),
                                       ("no", "No, it is not prime."), ("yes", "Yes, it is not composite.")])
def test_a_negation_elsewhere_leaves_the_stated_word(gold, text):
    assert judge(text, gold, CFG)[0] == "correct"
