"""Prompt templates (our own wording), kept as text files beside this module."""

from __future__ import annotations

from pathlib import Path

from bonforge.errors import ConfigError

HERE = Path(__file__).resolve().parent


def load(path: str | None, default: str, slots: tuple[str, ...], field: str) -> str:
    """The template at ``path`` (a recipe's field) or bonforge's ``default`` file; every slot must appear."""
    file = Path(path) if path else HERE / default
    if not file.is_file():
        raise ConfigError(f"{field}: {file} does not exist")
    text = file.read_text()
    for slot in slots:
        if slot not in text:
            raise ConfigError(f"{field} must contain {slot}")
    return text
