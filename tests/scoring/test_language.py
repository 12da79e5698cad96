"""Language identification reads the whole answer: a body in another language behind a long preamble in the
expected one is refused, an answer in the expected language (code included) passes, and a very long answer
is read in windows spread from its start to its end."""

from __future__ import annotations

import json

import pytest

from bonforge.scoring import Item, open_scorer
from bonforge.scoring.config import LanguageScorer

ENGLISH = ("The committee met on Tuesday to review the budget for the coming year. Several members argued that "
           "the library deserves more money, since visits have doubled since the renovation. Others preferred to "
           "repair the roads before winter arrives, because the potholes on the main street are getting worse. "
           "After a long discussion, they agreed to split the surplus between both projects and to meet again "
           "in March. ")
FRENCH = ("Le comité s'est réuni mardi pour examiner le budget de l'année prochaine. Plusieurs membres ont "
          "soutenu que la bibliothèque mérite davantage d'argent, puisque les visites ont doublé depuis la "
          "rénovation. D'autres préféraient réparer les routes avant l'arrivée de l'hiver, car les nids-de-poule "
          "de la rue principale s'aggravent. Après une longue discussion, ils ont décidé de partager l'excédent "
          "entre les deux projets et de se revoir en mars. ")


def repeat(text: str, chars: int) -> str:
    return (text * (chars // len(text) + 1))[:chars].rsplit(" ", 1)[0] + "\n\n"


@pytest.fixture(scope="module")
def scorer():
    s = open_scorer(LanguageScorer(kind="language_id", name="lang"))
    yield s
    s.close()


def test_a_body_in_another_language_behind_a_long_preamble_is_refused(scorer):
    preamble = repeat(ENGLISH, 4100)  # longer than the 4,000 characters the detector used to read
    hostile = preamble + repeat(FRENCH, 12_000)
    (got,) = scorer.score([Item("Summarise the meeting.", hostile, language="en")])
    assert (got.value, got.label) == (0.0, "fr")
    assert 0 < json.loads(got.detail)["expected_share"] < 0.5
    # a stricter share refuses a body that is not the larger part
    strict = open_scorer(LanguageScorer(kind="language_id", name="lang", min_share=0.9))
    (got,) = strict.score([Item("Summarise the meeting.", preamble + repeat(FRENCH, 3000), language="en")])
    assert (got.value, got.label) == (0.0, "en")


def test_an_answer_in_the_expected_language_passes(scorer):
    code = "```python\ndef total(xs):\n    return sum(x for x in xs if x > 0)\n```\n"
    answers = [repeat(ENGLISH, 9000), repeat(ENGLISH, 3000) + code + repeat(ENGLISH, 2000), "Yes."]
    heard: list[int] = []
    got = scorer.score([Item("Summarise the meeting.", a) for a in answers], heard.append)
    assert [(r.value, r.label) for r in got] == [(1.0, "en")] * 3 and heard == [1, 2, 3]  # after each answer
    (french,) = scorer.score([Item("Résumez la réunion.", repeat(FRENCH, 9000))])
    assert (french.value, french.label) == (1.0, "fr") and json.loads(french.detail)["from"] == "request"


def test_a_long_answer_is_read_in_windows_from_start_to_end():
    from bonforge.scoring.language import WINDOW, windows

    text = repeat(ENGLISH, 50_000) + "word " * 300
    every = windows(text, 10**9)
    assert all(WINDOW <= len(w) < 2 * WINDOW for w in every[:-1]) and " ".join(every) == " ".join(text.split())
    sampled = windows(text, 10 * WINDOW)
    assert len(sampled) == 10 and sampled[0] == every[0] and sampled[-1] == every[-1]
    assert windows("  \n ", 10 * WINDOW) == [] and windows("short tail", 10 * WINDOW) == ["short tail"]
    unspaced = "猫" * (5 * WINDOW)  # a language written without spaces: in pieces, not one window
    assert [len(w) for w in windows(unspaced, 10**9)] == [WINDOW] * 5


def test_a_body_in_a_language_written_without_spaces_is_read_in_pieces(scorer):
    chinese = "委员会周二开会审议明年的预算。几位委员认为图书馆应该得到更多的资金，因为翻修以来参观人数翻了一番。"
    (got,) = scorer.score([Item("Summarise the meeting.", repeat(ENGLISH, 4100) + chinese * 120, language="en")])
    assert (got.value, got.label) == (0.0, "zh")


@pytest.mark.parametrize("mark", ["\u200e", "\u200d", "\u200b", "\ufe0f", "\u00ad"])
def test_invisible_characters_do_not_pass_an_answer_for_another_language(scorer, mark):
    """A French answer with a direction mark (or a zero-width joiner, a variation selector, a soft hyphen)
    after every letter read as Swedish, Indonesian, Danish...: it passes no language but French."""
    hostile = "".join(c + mark if c.isalpha() else c for c in repeat(FRENCH, 3000))
    got = scorer.score([Item("?", hostile, language=lang) for lang in ("sv", "id", "da", "km", "fr")])
    assert [(r.value, r.label) for r in got] == [(0.0, "fr")] * 4 + [(1.0, "fr")]


def test_full_width_letters_are_read_as_their_letters(scorer):
    wide = "".join(chr(ord(c) + 0xFEE0) if "a" <= c <= "z" else c for c in repeat(ENGLISH, 3000))
    (got,) = scorer.score([Item("Summarise the meeting.", wide, language="en")])
    assert (got.value, got.label) == (1.0, "en")
