"""Near-duplicate texts (MinHash/LSH with an exact check): rewordings found, different problems kept apart,
the same drops in any row order, and hostile tables (empty, huge, unicode, identical rows by the million)."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

from bonforge.stages.decontaminate import normalized_words
from bonforge.tables.near_duplicates import bands, near_duplicates

BASE = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "She kept 6 clips for herself and gave the rest to her brother. How many clips did Natalia sell "
        "altogether in April and May?")  # fmt: skip


def word(i: int) -> str:
    """A made-up word without a digit (a digit would make it a number, which near duplicates must share)."""
    return "w" + "".join(chr(97 + int(d)) for d in str(i))


def drops(questions: list[str], ids: list[str] | None = None, **kw) -> dict[str, tuple[str, float]]:
    """``{dropped id: (kept id, Jaccard)}``."""
    ids = ids or [f"p{i:02d}" for i in range(len(questions))]
    out = near_duplicates(pa.array(ids, pa.string()), normalized_words(pa.array(questions, pa.string())), **kw)
    return {ids[row]: (ids[kept], sim) for row, kept, sim in out}


@pytest.mark.parametrize("variant, threshold", [
    (BASE.replace("friends", "classmates"), 0.85),  # a word replaced
    (BASE.replace(" then", ""), 0.85),  # a word deleted
    (BASE.replace("friends", "pals").replace("brother", "sister"), 0.8),  # two words replaced: 0.82 here
    (BASE.upper().replace(" ", "   ").replace(",", " ;").replace("?", " ??"), 0.85),  # case, spacing, punctuation
    (BASE.replace("48", "$48$").replace("6 clips", "\\(6\\) clips"), 0.85),  # LaTeX around the numbers
    ("\n\t" + BASE.replace("April", "april,") + "  \n", 0.85),
], ids=["word", "deleted", "two-words", "case-space-punct", "latex", "whitespace"])  # fmt: skip
def test_a_rewording_is_dropped_for_the_original(variant, threshold):
    got = drops([BASE, "What is 2 + 2?", variant], threshold=threshold)
    assert set(got) == {"p02"} and got["p02"][0] == "p00" and got["p02"][1] >= threshold


def test_the_later_id_is_dropped_whatever_the_row_order():
    got = drops([BASE.replace("friends", "pals"), BASE], ids=["b", "a"])
    assert got == {"b": ("a", pytest.approx(got["b"][1]))}


@pytest.mark.parametrize("a, b", [
    ("What is 17+25?", "What is 18+25?"),
    (BASE, BASE.replace("48", "49")),  # one number in 44 words: a word would give 0.90
    (BASE, BASE.replace("6 clips", "7 clips")),
    (BASE, BASE.replace("48", "48 and 48")),  # the same numbers, one more time: a multiset differs
    ("Find x if 3x + 5 = 20.", "Find x if 5x + 3 = 20."),  # the same numbers, other places
    (BASE + " Solve 2x + 3 = 7 first.", BASE + " Solve 5x + 3 = 7 first."),  # a coefficient is a number too
    (BASE + " Then find x²", BASE + " Then find x³"),
], ids=["short-sum", "long-one-number", "second-number", "repeated-number", "swapped-numbers", "coefficient",
        "power"])  # fmt: skip
def test_problems_with_other_numbers_are_kept_at_any_threshold(a, b):
    assert drops([a, b]) == {}
    assert drops([a, b], threshold=0.3) == {}


def test_word_order_counts():
    a, b = "Alice gives Bob the apples. How many does Bob keep?", "Bob gives Alice the apples. How many does Bob keep?"
    assert drops([a, b]) == {}  # the same words: only the word pairs tell them apart


def test_a_lower_threshold_takes_bigger_rewordings():
    """Control for the tests above: a bigger rewording is found once the threshold allows it."""
    variant = BASE.replace("friends", "pals").replace("brother", "sister").replace("then", "later")
    assert drops([BASE, variant]) == {}  # three words of 44: a Jaccard similarity of 0.74
    assert drops([BASE, variant], threshold=0.7) == {"p01": ("p00", pytest.approx(0.739, abs=1e-3))}


def test_every_drop_names_a_kept_text_it_really_resembles():
    """A chain A ~ B ~ C with A and C too far apart: C is not dropped for A through B."""
    words = BASE.split()
    b = " ".join(words[:10] + ["extra", "words", "here"] + words[10:])
    c = " ".join(words[:10] + ["extra", "words", "here", "and", "more", "words", "added"] + words[10:])
    assert drops([b, c], threshold=0.1)["p01"][1] > 0.88 > drops([BASE, c], threshold=0.1)["p01"][1]  # 0.92, 0.83
    assert drops([BASE, b, c], threshold=0.88) == {"p01": ("p00", pytest.approx(0.909, abs=1e-3))}  # C stays


def test_the_same_drops_in_any_row_order():
    rng = np.random.default_rng(7)
    vocab = [word(i) for i in range(300)]
    questions = [" ".join(rng.choice(vocab, 40)) + f" {rng.integers(100)}" for _ in range(200)]
    for i in range(0, 200, 4):  # a copy with one word changed, for a quarter of them
        words = questions[i].split()
        words[int(rng.integers(39))] = "changed"
        questions.append(" ".join(words).upper())
    ids = [f"q{i:04d}" for i in rng.permutation(len(questions))]
    first = drops(questions, ids)
    assert len(first) >= 48  # 50 planted; a pair near the threshold may be missed, never a wrong one added
    for seed in range(3):
        order = np.random.default_rng(seed).permutation(len(questions))
        assert drops([questions[i] for i in order], [ids[i] for i in order]) == first


def test_bands_follow_the_threshold():
    assert bands(0.85, 128) == (14, 9)
    for t in (0.5, 0.7, 0.85, 0.95):
        b, r = bands(t, 128)
        assert b * r <= 128 and 1 - (1 - t**r) ** b > 0.8  # a pair at the threshold is mostly a candidate


def test_empty_and_blank_questions_are_never_near_duplicates():
    questions = ["", "   ", "?!", "", "\n", BASE, BASE.replace("friends", "pals")]
    assert drops(questions) == {"p06": ("p05", pytest.approx(drops(questions)["p06"][1]))}
    assert drops(["", ""]) == {} and drops([]) == {}


def test_unicode_questions():
    full_width = BASE.replace("48", "\uff14\uff18")  # NFKC folds full-width digits
    greek = "Πόσα μήλα έχει η Μαρία αν έχει 5 και της δίνουν 3 ακόμη; Γράψε την απάντηση με λέξεις."
    spaced = greek.replace(" ", "  ").replace(";", " ;")
    got = drops([BASE, full_width, greek, spaced, greek.replace("5", "6"), "🍎🍎🍎 + 🍎 = ?", "🍎 = ?"])
    assert got["p01"][0] == "p00" and got["p03"][0] == "p02"
    assert set(got) == {"p01", "p03"}  # another number, emoji-only texts (no words) stay


def test_a_one_megabyte_question_and_its_rewording():
    rng = np.random.default_rng(3)
    big = " ".join(word(i) for i in rng.integers(0, 50_000, 170_000))  # about 1 MB
    assert len(big) > 1_000_000
    t0 = time.process_time()
    got = drops([big, big.replace(big.split()[500], "changed", 1), BASE])
    assert got["p01"][0] == "p00" and set(got) == {"p01"}
    assert time.process_time() - t0 < 30


def test_identical_rows_go_to_the_first_id():
    got = drops([BASE] * 1000, ids=[f"p{i:04d}" for i in range(999, -1, -1)])
    assert len(got) == 999 and set(got.values()) == {("p0000", 1.0)}


def test_a_million_copies_of_one_question():
    """One question a million times is one text to hash (1.6 s of CPU here)."""
    n = 1_000_000
    ids = pa.array([f"p{i:07d}" for i in range(n)])
    t0 = time.process_time()
    copies = near_duplicates(ids, normalized_words(pa.array(["What is 17 + 25?"] * n)))
    assert len(copies) == n - 1 and {k for _, k, _ in copies} == {0}
    assert time.process_time() - t0 < 30


def test_a_template_with_a_different_number_on_each_row():
    """The numbers are in every band's key: 100,000 rows of one template give no candidate pair at all."""
    n = 100_000
    template = pa.array([f"Tom has {i} apples and eats 3 of them. How many are left?" for i in range(n)])
    assert near_duplicates(pa.array([f"p{i:06d}" for i in range(n)]), normalized_words(template)) == []


def test_candidates_below_the_threshold_are_never_merged():
    """Rewordings at a Jaccard similarity of 0.73 share LSH buckets often; the exact check keeps them all."""
    rng = np.random.default_rng(11)
    vocab = [word(i) for i in range(5000)]
    questions = []
    for _ in range(100):
        words = list(rng.choice(vocab, 40, replace=False))
        questions.append(" ".join(words))
        for at in (5, 18, 31):  # three words apart: a similarity of 33/45 = 0.73
            words[at] = word(9000 + at)
        questions.append(" ".join(words))
    assert drops(questions) == {}
    assert len(drops(questions, threshold=0.65)) >= 95  # control: near duplicates at 0.65 (LSH may miss a few)


def test_twenty_thousand_rewordings_of_one_question():
    """One giant LSH bucket: each text is checked against its buckets' first texts, not against all others."""
    rng = np.random.default_rng(5)
    words = BASE.split()
    letters = [k for k, w in enumerate(words) if w.isalpha()]
    questions = [BASE]
    for i in range(20_000):  # each with another word in another place
        variant = list(words)
        variant[letters[rng.integers(len(letters))]] = word(i)
        questions.append(" ".join(variant))
    order = rng.permutation(len(questions))
    t0 = time.process_time()
    got = drops([questions[i] for i in order], [f"q{i:06d}" for i in order])
    assert len(got) >= 19_990 and {k for k, _ in got.values()} == {"q000000"}  # LSH may miss one in thousands
    assert time.process_time() - t0 < 30  # 1.3 s here
