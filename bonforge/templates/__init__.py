"""Prompt templates (our own wording), kept as text files beside this module: the sampling, GenSelect, FusioN and
judge prompts. It imports nothing of bonforge but its errors, so the recipe model, the scorers and the stages all
read it from below."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from bonforge.errors import ConfigError

HERE = Path(__file__).resolve().parent


def load(path: str | Path | None, default: str, slots: tuple[str, ...], field: str) -> str:
    """The template at ``path`` (the recipe's ``field``) or bonforge's ``default`` file; every slot must
    appear. Errors name the field and the file."""
    file = Path(path) if path else HERE / default
    try:
        text = file.read_text()
    except OSError as e:
        raise ConfigError(f"{field}: cannot read {file}: {e.strerror or e}") from None
    for slot in slots:
        if slot not in text:
            raise ConfigError(f"{field}: {file} has no {slot} placeholder")
    return text


def render(template: str, question: str) -> str:
    """The template with its ``{question}`` placeholder filled (other braces, e.g. LaTeX, stay as they are)."""
    return template.replace("{question}", question)


def render_column(template: str, questions: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``render`` of every question of a column at once, by Arrow: the template's text around each
    ``{question}`` joined with the question (the same strings)."""
    parts = template.split("{question}")
    if len(parts) == 1:
        return pa.repeat(template, len(questions))
    pieces: list = [pa.scalar(parts[0])]
    for part in parts[1:]:
        pieces += [questions, pa.scalar(part)]
    return pc.binary_join_element_wise(*pieces, "")
