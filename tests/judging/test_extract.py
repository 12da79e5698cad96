"""Taking the program out of a candidate's text."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings, strategies as st

from bonforge.judging.extract import extract_program, fenced_block
from bonforge.sandbox.languages import known_tags

PROMPT = 'def add(a, b):\n    """Add."""\n'


def test_last_python_block_wins():
    text = "First:\n```python\nx = 1\n```\nBetter:\n```py\nx = 2\n```\n```text\nnot code\n```\n"
    assert fenced_block(text) == "x = 2\n"
    assert extract_program(text, PROMPT, "stdio") == "x = 2\n"


def test_untagged_and_tilde_fences():
    assert fenced_block("~~~\nprint(1)\n~~~") == "print(1)\n"
    assert fenced_block("```\nprint(2)\n```") == "print(2)\n"
    assert fenced_block("no code here") is None


def test_unterminated_block_is_taken_to_the_end():
    assert extract_program("Here:\n```python\nprint(3)\n", None, "stdio") == "print(3)\n"


@pytest.mark.parametrize(
    ("mode", "kind", "text", "program"),
    [
        ("auto", "assert", "    return a + b\n", PROMPT + "    return a + b\n"),
        ("auto", "stdio", "print(1)\n", "print(1)\n"),
        ("auto", "assert", "```python\ndef add(a, b):\n    return a + b\n```", "def add(a, b):\n    return a + b\n"),
        ("prompt_completion", "stdio", "x", PROMPT + "x"),
        ("raw", "assert", "```python\nx\n```", "```python\nx\n```"),
        ("fenced", "stdio", "print(1)", ""),
    ],
)
def test_modes(mode, kind, text, program):
    assert extract_program(text, PROMPT, kind, mode) == program


def test_none_text_is_empty():
    assert extract_program(None, None, "stdio") == ""


@pytest.mark.timeout(30)
def test_many_unclosed_fences_take_linear_time():
    """Fence lines that never close (a degenerate completion): the block pattern once took quadratic time
    on them (32,000 lines: minutes of the host's time for one candidate)."""
    text = "```a\n" * 32000
    assert fenced_block(text) is None
    assert extract_program(text, None, "stdio") == text
    assert fenced_block(text + "~~~py\nx = 1\n~~~\n") == "x = 1\n"


PY_TAGS = {"", "python", "py", "python3", "py3"}


def _old_fenced_block(text: str, tags=frozenset(PY_TAGS)) -> str | None:
    """The line walk this module had before it scanned only fence lines: the reference for equal results (the
    last closed block tagged with one of ``tags``)."""
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    closing = {"```": [None] * (len(lines) + 1), "~~~": [None] * (len(lines) + 1)}
    for k in range(len(lines) - 1, -1, -1):
        for fence, nxt in closing.items():
            nxt[k] = k if lines[k].strip(" \t") == fence else nxt[k + 1]
    found, i = None, 0
    while i < len(lines) - 1:
        m = re.fullmatch(r"[ \t]*(```|~~~)[ \t]*([\w+#.-]*)[^\n]*", lines[i])
        end = closing[m.group(1)][i + 1] if m else None
        if end is None:
            i += 1
            continue
        if m.group(2).lower() in tags:
            found = text[starts[i + 1] : starts[end]]
        i = end + 1
    return found


def _old_unterminated(text: str) -> str | None:
    """The pattern the scan replaced, with the tags of the sandbox's other languages (pypy, cpp, ...) that the
    judge has read since it runs them."""
    others = "|".join(re.escape(t) for t in sorted(known_tags() - {""}, key=len, reverse=True))
    m = re.search(rf"^[ \t]*```[ \t]*(python3?|py|{others})?[ \t]*\n", text, re.M | re.I)
    return text[m.end():] if m and "```" not in text[m.end():] else None


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["```", "~~~", "```python", "```Py", "```text", " ", "\t", "\n", "\r", "x = 1",
                                 "print(2)", "`", "py", "python3"]), max_size=25).map("".join))
def test_the_fence_scan_reads_what_the_line_walk_read(text):
    assert fenced_block(text) == _old_fenced_block(text)
    # a closed block of any language the sandbox runs wins ("```pypy```" opens a pypy block); else one left open
    closed = _old_fenced_block(text, known_tags() | {""})
    expected = closed if closed is not None else _old_unterminated(text) or ""
    assert extract_program(text, "Q", "stdio", "fenced") == expected


def test_a_closed_block_of_another_language_wins_over_one_left_open():
    """Hypothesis found it: a pypy block (closed at once) before an untagged block left open."""
    assert extract_program("```pypy```\n```\n~~~", "Q", "stdio", "fenced") == ""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("text", [
    "```" + " " * 200_000,  # the open-block pattern was quadratic here: 36.7 s in one compute_score
    "```python" + " " * 200_000 + "\n" + "\t" * 200_000,
    ("```" + " " * 1000 + "\n") * 200,
    "\n" * 1_000_000,
])  # fmt: skip
def test_long_blank_runs_after_fences_take_linear_time(text):
    t0 = time.perf_counter()
    extract_program(text, "Q", "stdio")
    assert time.perf_counter() - t0 < 5.0  # idle: under 0.3 s each
