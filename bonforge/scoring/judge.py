"""A prompted judge: any generation engine (an OpenAI-compatible server, transformers, vLLM) reads a
template with the request and one answer (``{question}``, ``{answer}``, optionally ``{reference}``) and
writes a rating in double brackets, ``[[7]]``. The **last** such rating in the reply is the value (a
judge's reasoning may quote the format, or a rating the answer itself carries, before its verdict), passing
over ratings in quotation marks (a quote after the verdict is not the verdict); a reply
with none, or one outside the scale, is a ``parse_error`` with no value (never scored as a number), its
reply kept in ``detail``; a reply cut at its token limit (finish reason ``length``) is ``truncated`` with no
value whatever it holds (it may end quoting the answer, which can open with "Rating: [[10]]"); a prompt the
engine skips (longer than its window) is ``skipped``. ``parse_error`` and ``truncated`` rows are no score on
the answer: the ``scores`` stage never reuses them. ``label`` holds how many distinct ratings the reply
gave, so a stricter reading (exactly one) can be applied later."""

from __future__ import annotations

import hashlib
import json
import re

from bonforge.llm.base import Request
from bonforge.llm.models import model_identity as _model_identity
from bonforge.scoring.base import Item, Progress, Result, last_verdict
from bonforge import templates

VERSION = "3"  # 3: a rating the judged answer carries is not the judge's own;
# 2: a reply cut at its token limit is `truncated`, no value
DEFAULT = "judge_pointwise.txt"
SLOTS = ("{question}", "{answer}")
_RATING = re.compile(r"\[\[\s*(-?\d{1,3}(?:\.\d{1,4})?)\s*\]\]")
_SLOT = re.compile(r"\{(question|answer|reference)\}")
_READ = 20_000  # the reply's tail that is searched (a rating closes the reply)


def load_template(cfg) -> str:
    return templates.load(cfg.template, DEFAULT, SLOTS, f"scorers.{cfg.name}.template")


def fill(template: str, values: dict[str, str]) -> str:
    """Every slot replaced in one pass: a request that contains ``{answer}`` stays as it is."""
    return _SLOT.sub(lambda m: values.get(m.group(1)) or "", template)


def parse_rating(reply: str, low: float, high: float, answer: str = "") -> tuple[float | None, int]:
    """The last ``[[number]]`` of ``reply`` that the judged ``answer`` does not carry and that stands outside
    quotation marks (``last_verdict``) when it lies in [low, high] (else None), and how many distinct ratings
    the reply holds."""
    verdict, found = last_verdict(_RATING, reply[-_READ:], answer)
    if verdict is None:
        return None, 0
    value = float(verdict)
    return (value if low <= value <= high else None), len(set(map(float, found)))


def model_identity(cfg) -> dict:
    judge = cfg.judge
    return {"judge": {**{k: v for k, v in judge.key_config().items() if k not in ("name", "n")},
                      "model": _model_identity(judge.model, judge.revision)},
            "template_sha256": hashlib.sha256(load_template(cfg).encode()).hexdigest()}


class Judge:
    def __init__(self, cfg) -> None:
        from bonforge.llm import make_engine

        self.cfg = cfg
        self.template = load_template(cfg)
        self.engine = make_engine(cfg.judge)
        self.engine.start()

    def score(self, items: list[Item], progress: Progress | None = None) -> list[Result]:
        """``progress``: told as the judge's replies come (items without text count as scored at once)."""
        j = self.cfg.judge
        requests, at = [], []
        out: list[Result | None] = [None] * len(items)
        for i, item in enumerate(items):
            if item.text is None:
                out[i] = Result(None, "no_text")
                continue
            prompt = fill(self.template, {"question": item.question, "answer": item.text,
                                          "reference": item.reference})
            requests.append(Request(id=str(i), messages=({"role": "user", "content": prompt},), n=1,
                                    temperature=j.temperature, top_p=j.top_p, max_tokens=j.max_tokens, seed=j.seed))
            at.append(i)
        ready = len(items) - len(requests)
        told = None if progress is None else lambda k: progress(ready + k)
        for i, completions in zip(at, self.engine.generate(requests, told) if requests else []):
            if not completions:
                out[i] = Result(None, "skipped")
                continue
            reply = completions[0]
            value, distinct = parse_rating(reply.text, *self.cfg.scale, answer=items[i].text)
            status = "truncated" if reply.finish_reason == "length" else "ok" if value is not None else "parse_error"
            detail = json.dumps({"reply": reply.text[-2000:], "finish_reason": reply.finish_reason})
            out[i] = Result(value if status == "ok" else None, status, label=str(distinct),
                            n_tokens=reply.completion_tokens, detail=detail)
        return out  # type: ignore[return-value]

    def close(self) -> None:
        self.engine.close()


def open_scorer(cfg) -> Judge:
    return Judge(cfg)
