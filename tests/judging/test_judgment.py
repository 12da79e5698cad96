"""Reading a selector's judgment: the hand scan reads what the old pattern read, in linear time."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings, strategies as st

from bonforge.judging.judgment import parse_judgment


_OLD_JUDGMENT = re.compile(r"Judgment:\s*\**\s*(-?\d+)")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["Judgment:", "Judgment", " ", "\n", "*", "**", "-", "0", "7", "12", "x", "٣",
                                 "\u2003", "J"]), max_size=30).map("".join), st.integers(1, 20))
def test_parse_judgment_reads_what_the_pattern_read(text, n):
    """The hand scan gives the old pattern's reading on any text it could read in reasonable time."""
    found = _OLD_JUDGMENT.findall(text)
    want = int(found[-1]) if found else None
    assert parse_judgment(text, n) == (want if want is not None and 0 <= want < n else None)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("text", [
    "Judgment:" + " " * 400_000,  # the pattern took quadratic time here (40K spaces: 31 s)
    ("Judgment:" + " " * 50) * 8_000,
    "Judgment: **" + "\t" * 200_000 + "x",
    "Judgment: " + "9" * 100_000,  # past int()'s 4,300-digit limit: raised ValueError
])  # fmt: skip
def test_parse_judgment_is_linear_and_never_raises(text):
    t0 = time.perf_counter()
    assert parse_judgment(text, 4) is None
    assert time.perf_counter() - t0 < 1.0
    assert parse_judgment("Judgment: 000" + "0" * 10_000 + "2", 4) == 2
