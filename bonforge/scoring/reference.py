"""Reference metrics: sacrebleu's chrF, chrF++ and sentence BLEU (0-100), or the cosine similarity of sentence
embeddings (``bonforge.scoring.embed``), of each answer against its problem's reference answer.

BLEU uses sacrebleu's default 13a tokenizer (no tokenizer that downloads a model or needs MeCab): on
languages written without spaces chrF / chrF++ are the meaningful ones."""

from __future__ import annotations

from bonforge.scoring.base import Item, Result, ScorerError

VERSION = "1"


def model_identity(cfg) -> dict:
    if cfg.metric != "embed_cosine":
        import importlib.metadata as md

        try:
            return {"sacrebleu": md.version("sacrebleu")}
        except md.PackageNotFoundError:
            return {"sacrebleu": None}
    from bonforge.scoring.embed import model_identity as embed_identity

    return {"embed_model": embed_identity(cfg.embed_model)}


class ReferenceMetric:
    def __init__(self, cfg) -> None:
        self.cfg = cfg
        self.embedder = None
        if cfg.metric == "embed_cosine":
            from bonforge.scoring.embed import Embedder

            self.embedder = Embedder(cfg.embed_model)
            return
        try:
            from sacrebleu.metrics import BLEU, CHRF
        except ImportError:
            raise ScorerError(f"scorer {cfg.name!r}: sacrebleu is not installed "
                              "(pip install 'bonforge[open]')") from None
        self.metric = BLEU(effective_order=True) if cfg.metric == "bleu" else CHRF(
            word_order=2 if cfg.metric == "chrf++" else 0)

    def score(self, items: list[Item]) -> list[Result]:
        out: list[Result | None] = [None] * len(items)
        todo = []
        for i, item in enumerate(items):
            if item.reference is None or not item.reference.strip():
                out[i] = Result(None, "no_reference")
            elif item.text is None:
                out[i] = Result(None, "no_text")
            else:
                todo.append(i)
        if self.embedder is not None and todo:
            values = self.embedder.cosine([items[i].text for i in todo], [items[i].reference for i in todo])
            for i, v in zip(todo, values):
                out[i] = Result(float(v))
        else:
            for i in todo:
                out[i] = Result(float(self.metric.sentence_score(items[i].text, [items[i].reference]).score))
        return out  # type: ignore[return-value]

    def close(self) -> None:
        self.embedder = None


def open_scorer(cfg) -> ReferenceMetric:
    return ReferenceMetric(cfg)
