"""Taking the program out of a candidate's text."""

from __future__ import annotations

import pytest

from bonforge.judging.extract import extract_program, fenced_block

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
