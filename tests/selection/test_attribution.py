"""Contribution analysis on constructed cases with exact expected counts."""

from bonforge.selection.attribution import attribute, counts, coverage

A = "First we add the two numbers together to get twelve. "  # 52 chars
B = "Then multiplying by three gives thirty six in total. "  # 52 chars
NEW = "Completely novel closing words!"  # 31 chars, shares no 16-char span with A or B


def test_exact_copy_is_all_one_teacher():
    assert counts(attribute(A, [("t1", A), ("t2", B)])) == {"t1": len(A)}


def test_splice_of_two_teachers():
    assert counts(attribute(A + B, [("t1", A), ("t2", B)])) == {"t1": len(A), "t2": len(B)}


def test_text_from_nowhere_is_unmatched():
    assert counts(attribute(A + NEW, [("t1", A), ("t2", B)])) == {"t1": len(A), "unmatched": len(NEW)}


def test_same_span_in_two_teachers_is_multiple():
    assert counts(attribute(A + B, [("t1", A), ("t2", A + B), ("t3", A)])) == {"t2": len(A) + len(B)}
    assert counts(attribute(A, [("t1", A), ("t2", "x" + A)])) == {"multiple": len(A)}


def test_longest_covering_span_wins():
    # t1 has the first half of A, t2 has all of A: every character goes to t2's longer span
    half = A[:26]
    assert counts(attribute(A, [("t1", half), ("t2", A)])) == {"t2": len(A)}
    # text covered only by t1's half stays t1's; the rest is t2's
    assert counts(attribute(half + B, [("t1", half), ("t2", B)])) == {"t1": 26, "t2": len(B)}


def test_short_spans_do_not_count():
    assert counts(attribute("the answer", [("t1", "so the answer is")], min_span=16)) == {"unmatched": 10}
    assert counts(attribute("the answer", [("t1", "so the answer is")], min_span=4)) == {"t1": 10}


def test_several_texts_of_one_owner_and_positions():
    labels = attribute(A + B, [("t1", A), ("t1", B)])
    assert counts(labels) == {"t1": len(A) + len(B)}
    cover = coverage(A + NEW, A, 16)
    assert list(cover[: len(A)]) == [len(A)] * len(A) and not cover[len(A):].any()
    assert attribute("", [("t1", A)]) == []
