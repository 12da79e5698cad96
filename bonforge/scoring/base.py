"""What every scorer shares: the item it scores, the result it gives, the error of a scorer that cannot run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

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


class Scorer(Protocol):
    def score(self, items: list[Item]) -> list[Result]: ...

    def close(self) -> None: ...
