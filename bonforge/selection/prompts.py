"""Selection prompts (GenSelect): the template, its rendering and the token counts of prompts, shared by the
stages that build prompts (genselect, selector_eval, fusion_select).

Token counts come from the configured tokenizer (a ``tokenizer.json`` file or a local model directory).
Without one, the estimate is ceil(UTF-8 bytes / 3): BPE vocabularies of current LLMs average 3.5–4.5
bytes per token on English, maths and code, so the estimate over-counts and never lets an over-long
prompt through.
"""

from __future__ import annotations

import hashlib
import string
from functools import lru_cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bonforge import templates
from bonforge.config import GenSelectConfig
from bonforge.errors import ConfigError
from bonforge.schema import NO_LABEL

# Verdicts that say nothing about the candidate (the checker, the sandbox or the machine failed): such candidates
# never enter a prompt.
UNRELIABLE = {"math": {"timeout", "error"}, "code": set(NO_LABEL)}


def template_text(cfg: GenSelectConfig) -> str:
    text = templates.load(cfg.template, "genselect.txt", ("{question}", "{candidates}"), "genselect.template")
    _parts(text)  # an unknown placeholder fails here, before anything runs
    return text


def key_config(cfg: GenSelectConfig, seed: int) -> dict:
    """Config in the stage key: the template's text (not its path) and the tokenizer's identity."""
    out = cfg.key_config()
    out["template"] = hashlib.sha256(template_text(cfg).encode()).hexdigest()
    out["seed"] = seed
    if cfg.tokenizer and Path(cfg.tokenizer).exists():
        out["tokenizer"] = tokenizer_key(Path(cfg.tokenizer))
    return out


_TOKENIZER_FILES = ("tokenizer", "vocab", "merges", "special_tokens_map", "added_tokens", "spiece", "sentencepiece")


def tokenizer_key(path: Path) -> dict:
    """A local tokenizer as a key holds it: a file's content, or the content of a folder's tokenizer files
    (not its weights): the same tokenizer anywhere keys alike, one edited in place does not."""
    from bonforge.sources.digest import content_key

    if path.is_file():
        return content_key(path)
    files = sorted(p for p in path.iterdir() if p.is_file() and p.name.startswith(_TOKENIZER_FILES))
    return {p.name: content_key(p)["sha256"] for p in files}


@lru_cache(maxsize=4)
def _tokenizer(spec: str):
    path = Path(spec)
    if path.is_file():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path))
        return lambda text: len(tok.encode(text).ids)
    if (path / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        return lambda text: len(tok.encode(text).ids)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    return lambda text: len(tok.encode(text))


def token_counter(cfg: GenSelectConfig):
    if cfg.tokenizer:
        return _tokenizer(cfg.tokenizer), f"tokenizer:{Path(cfg.tokenizer).name}"
    return (lambda text: int(_estimate(len(text.encode("utf-8"))))), "estimate"


def _estimate(n_bytes):
    """ceil(UTF-8 bytes / 3), of a count or of an array of counts."""
    return (n_bytes + 2) // 3


SLOTS = ("question", "candidates", "n", "last_index")


def _parts(template: str) -> list[tuple[str, str | None, str]]:
    """The template as (literal text, placeholder or None, its format spec and conversion) pieces."""
    parts = []
    for literal, name, spec, conv in string.Formatter().parse(template):
        if name is not None and name not in SLOTS:
            raise ConfigError(f"genselect.template: unknown placeholder {{{name}}}; the slots are "
                              + ", ".join(f"{{{s}}}" for s in SLOTS) + " (write {{ and }} for a literal brace)")
        parts.append((literal, name, (f"!{conv}" if conv else "") + (f":{spec}" if spec else "")))
    return parts


def render_many(template: str, questions: pa.Array, texts: pa.ListArray) -> pa.Array:
    """One prompt per row: its question and its candidates' texts (in prompt order; both stripped of
    surrounding whitespace) rendered into the template, each candidate as a ``### Candidate <i>`` block;
    built column-wise in Arrow."""
    n = pc.list_value_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = texts.offsets.to_numpy()
    position = np.arange(offsets[-1] - offsets[0]) - np.repeat(offsets[:-1] - offsets[0], n)
    kind = questions.type  # string, or large_string where the texts may pass 2 GiB
    headers = pa.array([f"### Candidate {i}\n" for i in range(int(n.max(initial=0)))], kind)
    blank = pa.scalar("", kind)
    blocks = pc.binary_join_element_wise(headers.take(pa.array(position)), texts.flatten(), blank)
    values = {
        "question": questions,
        "candidates": pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets - offsets[0]), blocks),
                                     pa.scalar("\n\n", kind)),
        "n": n,
        "last_index": n - 1,
    }
    pieces: list = []
    for literal, name, spec in _parts(template):
        pieces.append(pa.scalar(literal, kind))
        if name and spec:
            plain = values[name].to_pylist() if isinstance(values[name], pa.Array) else values[name].tolist()
            pieces.append(pa.array([("{0" + spec + "}").format(v) for v in plain], kind))
        elif name:
            pieces.append(pa.array(values[name]).cast(kind))
    return pc.binary_join_element_wise(*pieces, blank) if len(questions) else pa.array([], kind)


def render_all(template: str, questions: list[str], texts: list[list[str]]) -> list[str]:
    """``render_many`` of plain lists (stripped here)."""
    stripped = pa.array([[t.strip() for t in row] for row in texts], pa.list_(pa.string()))
    return render_many(template, pa.array([q.strip() for q in questions], pa.string()), stripped).to_pylist()


def token_counts(cfg: GenSelectConfig, texts: pa.Array) -> np.ndarray:
    """``token_counter``'s count of each text."""
    if cfg.tokenizer:
        count = _tokenizer(cfg.tokenizer)
        return np.array([count(t) for t in texts.to_pylist()], dtype=np.int64)
    return _estimate(pc.binary_length(texts).to_numpy(zero_copy_only=False).astype(np.int64))


def answer_groups(answers: list[str | None]) -> list[int]:
    """Group labels in order of first appearance; -1 for a candidate without an answer."""
    labels: dict[str, int] = {}
    return [-1 if a is None else labels.setdefault(a, len(labels)) for a in answers]


# A selector's input: one row per prompt, with the answer groups of its candidates.
SELECTION = pa.schema([("prompt_id", pa.string()), ("problem_id", pa.string()), ("prompt", pa.string()),
                       ("n_candidates", pa.int32()), ("correct_indices", pa.list_(pa.int32())),
                       ("n_tokens", pa.int32()), ("answer_groups", pa.list_(pa.int32()))])
