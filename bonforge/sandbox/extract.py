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

_FENCE = re.compile(
    r"^[ \t]*(?P<fence>```|~~~)[ \t]*(?P<lang>[\w+#.-]*)[^\n]*\n(?P<body>.*?)^[ \t]*(?P=fence)[ \t]*$",
    re.M | re.S,
)
_PY_TAGS = {"", "python", "py", "python3", "py3"}


def fenced_block(text: str) -> str | None:
    """The last python (or untagged) fenced block's content, or None."""
    found = [m.group("body") for m in _FENCE.finditer(text) if m.group("lang").lower() in _PY_TAGS]
    return found[-1] if found else None


def _unterminated_block(text: str) -> str | None:
    """A block opened but never closed (a completion cut at its token limit): the rest of the text."""
    m = re.search(r"^[ \t]*```[ \t]*(python3?|py)?[ \t]*\n", text, re.M | re.I)
    return text[m.end():] if m and "```" not in text[m.end():] else None


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
