"""What every scorer shares: the item it scores, the result it gives, the error of a scorer that cannot run."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Protocol

from bonforge.errors import ConfigError

# ok: a value; no_reference: the problem has no reference (reference metrics); no_text: the candidate has none
STATUSES = ("ok", "no_reference", "no_text")


class ScorerError(ConfigError):
    """A scorer that cannot run (its model, package or server), not a candidate's fault."""


@dataclass(frozen=True)
class Item:
    question: str
    text: str | None
    reference: str | None = None
    language: str | None = None  # the expected language (ISO 639-1), when the problem states it


@dataclass(frozen=True)
class Result:
    value: float | None
    status: str = "ok"
    label: str | None = None
    n_tokens: int | None = None
    truncated: bool | None = None
    detail: str | None = None


Progress = Callable[[int], None]  # progress(k): k of the items given are scored (k only grows)


class Scorer(Protocol):
    def score(self, items: list[Item], progress: Progress | None = None) -> list[Result]:
        """One result per item, in order; with ``progress``, told as batches (or requests) finish."""

    def close(self) -> None: ...


_QUOTES = ('"', "\u201c", "\u201d", "`")


def last_verdict(pattern: re.Pattern, reply: str, judged: str = "") -> tuple[str | None, list[str]]:
    """A judge's verdict in ``reply``: the last match of ``pattern`` (its first group), preferring one that the
    ``judged`` text (the answers the judge was shown) does not carry itself, then one that is not quoted (no
    quotation mark left open before it on its line, not on a ``>`` quote line); and every match. A judge
    quoting the rating an answer carries after its own verdict (in a code block, in any quotation marks, on a
    line of its own) does not give that rating."""
    carried = {m.group(1) for m in pattern.finditer(judged)}
    found, best, rank = [], None, -1
    for m in pattern.finditer(reply):
        found.append(m.group(1))
        line = reply[reply.rfind("\n", 0, m.start()) + 1:m.start()]
        unquoted = sum(line.count(q) for q in _QUOTES) % 2 == 0 and not line.lstrip().startswith(">")
        if (r := 2 * (m.group(1) not in carried) + unquoted) >= rank:
            best, rank = m.group(1), r
    return best, found
