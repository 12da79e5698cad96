"""Taking the program out of a candidate's text.

Modes (``CodeVerifyConfig.extraction``):

* ``fenced``: the last fenced code block tagged python/py/python3 or untagged (``` or ~~~); none gives
  an empty program (a ``compile_error`` verdict says so).
* ``prompt_completion``: the problem's question (the HumanEval prompt: signature and docstring)
  followed by the text, as completion models continue it.
* ``raw``: the text as is.
* ``auto``: ``fenced`` when the text holds a fenced block; else ``prompt_completion`` for ``assert``
  problems; else ``raw``.
"""

from __future__ import annotations

import re

_OPENER = re.compile(r"[ \t]*(```|~~~)[ \t]*([\w+#.-]*)[^\n]*")  # a fence line: fence, language tag, rest
_PY_TAGS = {"", "python", "py", "python3", "py3"}
_OPEN_TAGS = {"", "python", "python3", "py"}  # of a block left open


def fenced_block(text: str) -> str | None:
    """The last python (or untagged) fenced block's content, or None. A block runs from an opening fence
    line to the next line holding only the same fence; an opening with no such line is not a block.
    One pass over the lines (a text of many unclosed fences costs linear time, not quadratic)."""
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    closing = {"```": [None] * (len(lines) + 1), "~~~": [None] * (len(lines) + 1)}  # next closing line from k
    for k in range(len(lines) - 1, -1, -1):
        bare = lines[k].strip(" \t")
        for fence, nxt in closing.items():
            nxt[k] = k if bare == fence else nxt[k + 1]
    found, i = None, 0
    while i < len(lines) - 1:  # an opening line ends in a newline
        m = _OPENER.fullmatch(lines[i])
        end = closing[m.group(1)][i + 1] if m else None
        if end is None:
            i += 1
            continue
        if m.group(2).lower() in _PY_TAGS:
            found = text[starts[i + 1] : starts[end]]
        i = end + 1
    return found


def _unterminated_block(text: str) -> str | None:
    """A block opened but never closed (a completion cut at its token limit): the rest of the text after
    the first line holding only a fence tagged python/py/python3 or untagged. A scan of the lines (a
    pattern with two runs of optional blanks around the tag took quadratic time on a fence followed by
    a long run of spaces)."""
    start = 0
    while (end := text.find("\n", start)) >= 0:
        bare = text[start:end].strip(" \t")
        if bare.startswith("```") and bare[3:].lstrip(" \t").lower() in _OPEN_TAGS:
            rest = text[end + 1 :]
            return rest if "```" not in rest else None
        start = end + 1
    return None


def extract_program(text: str | None, question: str | None, kind: str, mode: str = "auto") -> str:
    text = text or ""
    if mode == "raw":
        return text
    if mode == "prompt_completion":
        return (question or "") + text
    block = fenced_block(text)
    if block is None:
        block = _unterminated_block(text)
    if mode == "fenced":
        return block or ""
    if block is not None:
        return block
    return (question or "") + text if kind == "assert" else text
