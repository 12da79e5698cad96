"""Reference metrics: sacrebleu's chrF, chrF++ and sentence BLEU (0-100), or the cosine similarity of sentence
embeddings (``bonforge.scoring.embed``), of each answer against its problem's reference answer.

BLEU uses sacrebleu's default 13a tokenizer (no tokenizer that downloads a model or needs MeCab): on
languages written without spaces chrF / chrF++ are the meaningful ones."""

from __future__ import annotations

from bonforge.scoring.base import Item, Progress, Result, ScorerError

VERSION = "1"
PIECE = 32  # sacrebleu's answers scored between two calls of ``progress``


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

    def score(self, items: list[Item], progress: Progress | None = None) -> list[Result]:
        """``progress``: told after each piece of answers (an embedding model's batch; ``PIECE`` for sacrebleu:
        the embedder's batches stay those of one call over every answer)."""
        out: list[Result | None] = [None] * len(items)
        todo = []
        for i, item in enumerate(items):
            if item.reference is None or not item.reference.strip():
                out[i] = Result(None, "no_reference")
            elif item.text is None:
                out[i] = Result(None, "no_text")
            else:
                todo.append(i)
        piece = self.embedder.batch_size if self.embedder is not None else PIECE
        for start in range(0, len(todo), piece):
            at = todo[start:start + piece]
            texts, references = [items[i].text for i in at], [items[i].reference for i in at]
            values = self.embedder.cosine(texts, references) if self.embedder is not None else [
                self.metric.sentence_score(t, [r]).score for t, r in zip(texts, references)]
            for i, v in zip(at, values):
                out[i] = Result(float(v))
            if progress is not None:
                progress(len(items) - len(todo) + start + len(at))
        return out  # type: ignore[return-value]

    def close(self) -> None:
        self.embedder = None


def open_scorer(cfg) -> ReferenceMetric:
    return ReferenceMetric(cfg)
