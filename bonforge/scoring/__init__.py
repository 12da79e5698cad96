"""Scorers of open-ended answers: a value per (candidate, scorer) where no gold answer exists.

One module per kind: ``reference`` (chrF / BLEU / embedding cosine against the problem's reference),
``language`` (the answer's language, offline), ``reward_model`` (a sequence-classification model's raw logit
through transformers, vLLM or a server), ``judge`` (a prompted model's rating). ``open_scorer(cfg)`` gives an
object whose ``score(items, progress=None)`` returns one ``Result`` per ``Item``, in order, telling
``progress(k)`` as its batches or requests finish (so that the ``scores`` stage's progress moves within a
shard); ``identity(cfg)`` is what decides its values (the ``scores`` stage's row identity). A row failure is a
``Result`` with a status; a failure of the scorer itself (a model that does not load, a server that does not
answer) raises ``ScorerError``.
"""

from __future__ import annotations

from typing import Any

from bonforge.scoring.base import STATUSES, Item, Progress, Result, Scorer, ScorerError

__all__ = ["STATUSES", "Item", "Progress", "Result", "Scorer", "ScorerError", "identity", "open_scorer"]


def _module(kind: str) -> Any:
    from bonforge.scoring import judge, language, reference, reward_model

    return {"reference": reference, "language_id": language, "reward_model": reward_model, "judge": judge}[kind]


def open_scorer(cfg: Any) -> Scorer:
    return _module(cfg.kind).open_scorer(cfg)


def identity(cfg: Any) -> dict:
    """What decides a scorer's values: its settings (less execution-only ones and its name), its module's
    version and its model's identity."""
    module = _module(cfg.kind)
    out = {k: v for k, v in cfg.key_config().items() if k != "name"}
    return {**out, "version": module.VERSION, **module.model_identity(cfg)}
