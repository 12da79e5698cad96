"""Taking the program out of a candidate's text.

Modes (``CodeVerifyConfig.extraction``):

* ``fenced``: the last fenced code block tagged with a language the sandbox runs (python/py/python3,
  cpp/c++, java, pypy/pypy3, ...: ``bonforge.sandbox.languages``) or untagged (``` or ~~~); none gives an
  empty program (a ``compile_error`` verdict says so). The tag names the program's language
  (``extract_code``); an untagged block has none (the record's, else the recipe's ``default_language``).
* ``prompt_completion``: the problem's question (the HumanEval prompt: signature and docstring)
  followed by the text, as completion models continue it.
* ``raw``: the text as is.
* ``auto``: ``fenced`` when the text holds a fenced block; else ``prompt_completion`` for ``assert``
  problems; else ``raw``.
"""

from __future__ import annotations

import bisect
import re
from typing import Iterator

from bonforge.sandbox.languages import known_tags

_FENCE_LINE = re.compile(r"^[ \t]*(?:```|~~~)[^\n]*", re.M)  # a line starting with a fence (linear: no
# two runs that can trade characters)
_OPENER = re.compile(r"[ \t]*(```|~~~)[ \t]*([\w+#.-]*)[^\n]*")  # a fence line: fence, language tag, rest
_PY_TAGS = {"", "python", "py", "python3", "py3"}
_OPEN_TAGS = {"", "python", "python3", "py"}  # of a block left open
_CODE_TAGS = known_tags() | {""}  # a block of a language the sandbox runs, or untagged


def _fence_lines(text: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, line)`` of each line that starts with a fence, ``end`` at its newline (or the text's
    end): only these can open or close a block, so the scans below never walk the other lines."""
    return ((m.start(), m.end(), m.group()) for m in _FENCE_LINE.finditer(text))


def fenced_block(text: str) -> str | None:
    """The last python (or untagged) fenced block's content, or None."""
    found = last_block(text, _PY_TAGS)
    return None if found is None else found[0]


def last_block(text: str, tags=_CODE_TAGS) -> tuple[str, str] | None:
    """(content, tag in lower case) of the last fenced block whose tag is one of ``tags``, or None. A block
    runs from an opening fence line to the next line holding only the same fence; an opening with no such
    line is not a block. One pass over the fence lines (a text of many unclosed fences costs linear time,
    not quadratic)."""
    lines = list(_fence_lines(text))
    closers: dict[str, list[int]] = {"```": [], "~~~": []}  # the lines holding only that fence, in order
    for k, (_, _, line) in enumerate(lines):
        closers.get(line.strip(" \t"), []).append(k)
    found, i = None, 0
    while i < len(lines) and lines[i][1] < len(text):  # an opening line ends in a newline
        m = _OPENER.fullmatch(lines[i][2])
        after = closers[m.group(1)]
        j = bisect.bisect_right(after, i)
        if j == len(after):
            i += 1
            continue
        end = after[j]
        if m.group(2).lower() in tags:
            found = text[lines[i][1] + 1 : lines[end][0]], m.group(2).lower()
        i = end + 1
    return found


def _unterminated_block(text: str, tags=_OPEN_TAGS) -> tuple[str, str] | None:
    """A block opened but never closed (a completion cut at its token limit): the rest of the text after
    the first line holding only a fence tagged python/py/python3 or untagged (a scan of the fence lines:
    the pattern it replaces, with optional blanks on both sides of the tag, took quadratic time on a
    fence followed by a long run of spaces)."""
    for _, end, line in _fence_lines(text):
        bare = line.strip(" \t")
        tag = bare[3:].lstrip(" \t").lower()
        if end < len(text) and bare.startswith("```") and tag in tags:
            rest = text[end + 1 :]
            return (rest, tag) if "```" not in rest else None
    return None


def before_open_block(text: str) -> str:
    """``text`` up to the opening fence line of a block it ends inside, whatever its tag: a response cut at its
    token limit in the middle of a program states no answer there (the last number of ``for k in range(9):``
    is not a 9), nor does a block the model opened and never closed. A text whose blocks are all closed is
    returned whole. Depends on nothing outside this module (it is part of the maths judge's fingerprint)."""
    lines = list(_fence_lines(text))
    closers: dict[str, list[int]] = {"```": [], "~~~": []}
    for k, (_, _, line) in enumerate(lines):
        closers.get(line.strip(" \t"), []).append(k)
    i = 0
    while i < len(lines):
        m = _OPENER.fullmatch(lines[i][2])
        after = closers[m.group(1)]
        j = bisect.bisect_right(after, i)
        if j == len(after):
            return text[: lines[i][0]]
        i = after[j] + 1
    return text


def extract_program(text: str | None, question: str | None, kind: str, mode: str = "auto") -> str:
    """The program of a candidate's text (``extract_code`` without its language)."""
    return extract_code(text, question, kind, mode)[0]


def extract_code(text: str | None, question: str | None, kind: str, mode: str = "auto") -> tuple[str, str | None]:
    """(program, the fence's language tag or None) of a candidate's text, by ``mode`` (this module's doc)."""
    text = text or ""
    if mode == "raw":
        return text, None
    if mode == "prompt_completion":
        return (question or "") + text, None
    found = last_block(text)
    if found is None:
        found = _unterminated_block(text, _OPEN_TAGS | known_tags())
    if mode == "fenced":
        return found or ("", None)
    if found is not None:
        return found[0], found[1] or None
    return ((question or "") + text if kind == "assert" else text), None
