"""Reading a selector's answer: the index after the last ``Judgment:`` (GenSelect's output contract).

``Judgment:``, optional whitespace, optional markdown bold stars, optional whitespace, then an optionally
negative decimal number. The last such judgment in the text counts. A scan in linear time (from each
marker, the last one first: a run of blanks and stars, then digits): the pattern it replaces
(``Judgment:\\s*\\**\\s*(-?\\d+)``) took quadratic time on a judgment followed by a long run of spaces
(40K spaces: 31 s), which a degenerate policy writes by itself.
"""

from __future__ import annotations

import re

MARKER = "Judgment:"
MAX_INDEX_DIGITS = 18  # more significant digits than any prompt's candidates (and int()'s 4,300-digit limit)
# Each matched only at one position: a single greedy run per pattern, that always matches, never backtracks
_GAP = re.compile(r"\s*\**\s*")
_NUMBER = re.compile(r"(-?)(\d+)")


def _index_at(text: str, i: int) -> int | None:
    """The number of a judgment whose marker ends at ``i``, or None when none follows it."""
    m = _NUMBER.match(text, _GAP.match(text, i).end())
    if m is None:
        return None
    digits = m.group(2).lstrip("0") or "0"  # int() reads any Unicode decimal digit, as \d matched them
    if len(digits) > MAX_INDEX_DIGITS:
        return -1  # a judgment, but of no candidate
    return -int(digits) if m.group(1) else int(digits)


def parse_judgment(text: str | None, n: int) -> int | None:
    """The index after the last ``Judgment:``; None when missing or not in 0..n-1."""
    text = text or ""
    end = len(text)
    while (at := text.rfind(MARKER, 0, end)) >= 0:
        index = _index_at(text, at + len(MARKER))
        if index is not None:
            return index if 0 <= index < n else None
        end = at  # the marker cannot overlap itself
    return None
