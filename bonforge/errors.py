"""Exceptions that cross process boundaries (Ray workers, sandbox runners).

Every error pickles (single-argument constructors or ``__reduce__``) and says whether a retry may help
by its type: ``TransientError`` subclasses may be retried, everything else is terminal.
"""

from __future__ import annotations


def shown(value: object, limit: int = 80) -> str:
    """``value`` as an error message quotes it: its ``repr``, cut to about ``limit`` characters with its full
    length said (a 2 MB value is never echoed whole)."""
    if isinstance(value, int) and value.bit_length() > 256:  # repr past 4,300 digits raises
        return f"an integer of {value.bit_length():,} bits"
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value):,} characters" if isinstance(value, str) else f"{len(text):,} characters as text"
    return f"{clip(text, limit)} ({size})"


def clip(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters (``...`` at the end where it was cut)."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def reasons(why: dict[str, int]) -> str:
    """``why`` (reason -> rows) as one phrase, the commonest first."""
    top = sorted(why.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{reason}: {n}" for reason, n in top[:5]) + (f", {len(top) - 5} more reasons" if len(top) > 5
                                                                     else "")


class BonforgeError(Exception):
    """Base of every error bonforge raises on purpose."""


class BonforgeWarning(UserWarning):
    """Warnings bonforge emits (tests turn them into errors)."""


class ConfigError(BonforgeError, ValueError):
    """A recipe or option is invalid; the message names the field path."""


class DataError(BonforgeError, ValueError):
    """An input record is malformed; names the source, the record and the field."""

    def __init__(self, message: str, source: str = "", record: str | int | None = None, field: str = ""):
        self.source, self.record, self.field = source, record, field
        where = ", ".join(
            p
            for p in (source, f"record {record}" if record is not None else "", f"field {field!r}" if field else "")
            if p
        )
        super().__init__(f"{where}: {message}" if where else message)
        self.message = message

    def __reduce__(self):
        return (self.__class__, (self.message, self.source, self.record, self.field))


class MissingModules(BonforgeError):
    """A module the recipe needs (an engine's, a scorer's, an S3 store's) is not installed; names the command
    that installs it."""


class FetchError(BonforgeError):
    """A public file could not be obtained (offline, no mirror, checksum mismatch)."""


class StoreError(BonforgeError):
    """The stage store is missing something a reader asked for."""


class TransientError(BonforgeError):
    """A failure that a retry may fix (HTTP 429/5xx, a sandbox container dying)."""


class SandboxError(TransientError):
    """The sandbox itself failed: never reported as a candidate failure."""


class EmptyDataset(BonforgeError):
    """A build left no prompt to export, and the recipe does not allow an empty dataset."""

    def __init__(self, counts: dict[str, int], dropped_too_long: int = 0):
        self.counts, self.dropped_too_long = counts, dropped_too_long
        kept = counts.get("kept", 0)
        drops = ", ".join(f"{why} {n}" for why, n in counts.items() if why != "kept")
        why = (f"{kept} problems passed the filter but gave no prompt" if kept else "no problem passed the filter")
        long = f", {dropped_too_long} prompts were over genselect.max_tokens" if dropped_too_long else ""
        super().__init__(f"nothing to export: {why} (dropped: {drops or 'none'}{long}); no dataset version was "
                         "published (set export.allow_empty: true to publish an empty one)")

    def __reduce__(self):
        return (self.__class__, (self.counts, self.dropped_too_long))
