"""Stage ``scores``: every candidate of one candidates stage scored by every scorer the recipe lists
(``bonforge.scoring``), one row per (candidate, scorer), for open-ended problems (no gold answer).

A score's content identity (``bonforge.identity``) is the scorer's identity (its settings, its module's
version, its model's identity: a local directory by its files), the problem's request, reference and
language, and the candidate's text: a rerun with one more scorer, or one more teacher, computes only the
new rows. A judge's reply without a rating (``parse_error``, ``truncated``) is no score: never reused, a later
build asks again. Scorers are opened in the stage's process only when some row of theirs must be computed (a
reward model is loaded once per node, not per shard)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pyarrow as pa

from bonforge import identity, scoring
from bonforge.config import Recipe
from bonforge.scoring.config import ScorerConfig

from bonforge.schema import SCORES
from bonforge.stage import Inputs, Node, Params, Ref, Rows, Stage
from bonforge.llm.models import model_resource

VERSION = "1"
_CONTENT = ("kind", "value", "label", "status", "n_tokens", "truncated", "detail", "latency_ms")
_PROBLEMS = ["problem_id", "domain", "question", "answer", "metadata"]


@dataclass(frozen=True)
class ScoresParams(Params):
    scorers: tuple[ScorerConfig, ...]

    def key_config(self) -> dict:
        return {"scorers": [{"name": s.name, **scoring.identity(s)} for s in self.scorers]}


def _language(metadata: str | None) -> str | None:
    try:
        value = json.loads(metadata).get("language") if metadata else None
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


def _ids(candidates: pa.Table, context: dict, params: ScoresParams) -> pa.Table:
    """One row per (candidate, scorer), candidate-major (the candidates' problem order)."""
    problems = context["problems"]
    parts = pa.table({
        "problem_id": problems.column("problem_id"), "domain": problems.column("domain"),
        "gold": pa.array([json.dumps([q, a, _language(m)]) for q, a, m in zip(
            *(problems.column(c).to_pylist() for c in ("question", "answer", "metadata")))]),
    })
    n, k = candidates.num_rows, len(params.scorers)
    per_scorer = [identity.verdict_ids(identity.settings("score", {"stage": VERSION, "scorer": scoring.identity(s)}),
                                       parts, candidates) for s in params.scorers]
    order = np.arange(n * k).reshape(k, n).T.ravel()  # candidate-major
    row_ids = pa.concat_arrays(per_scorer).take(pa.array(order)) if n else pa.array([], identity.TYPE)
    pick = pa.array(np.repeat(np.arange(n), k))
    names = pa.array([s.name for s in params.scorers] * n, pa.string())
    return pa.table({"candidate_id": candidates.column("candidate_id").take(pick), "scorer": names,
                     "row_id": row_ids, "problem_id": candidates.column("problem_id").take(pick),
                     "teacher": candidates.column("teacher").take(pick)})


class Scoring:
    """The scorers of one node, each opened on first use and closed with the node."""

    def __init__(self, params: ScoresParams) -> None:
        self.params = params
        self.opened: dict[str, Any] = {}

    def __enter__(self):
        return self.compute

    def __exit__(self, *exc) -> None:
        for scorer in self.opened.values():
            scorer.close()
        self.opened.clear()

    def compute(self, candidates: pa.Table, problems: pa.Table, todo: pa.Table | None = None,
                progress=None) -> pa.Table:
        """``progress(done, of)``: the rows scored of those asked, as each scorer's batches or requests finish
        (``bonforge.stage.Stage.reports``)."""
        wanted = _ids(candidates, {"problems": problems}, self.params) if todo is None else todo
        by_id = {c: i for i, c in enumerate(candidates.column("candidate_id").to_pylist())}
        texts = candidates.column("text").to_pylist()
        prob = {p: (q, a, _language(m)) for p, q, a, m in zip(
            *(problems.column(c).to_pylist() for c in ("problem_id", "question", "answer", "metadata")))}
        scorers = {s.name: s for s in self.params.scorers}
        rows: dict[str, list] = {f.name: [] for f in SCORES}
        names = wanted.column("scorer").to_pylist()
        done = 0
        for name in dict.fromkeys(names):
            at = [i for i, s in enumerate(names) if s == name]
            cids = wanted.column("candidate_id").take(pa.array(at)).to_pylist()
            items = []
            for cid in cids:
                q, a, lang = prob[wanted.column("problem_id")[at[len(items)]].as_py()]
                items.append(scoring.Item(question=q, text=texts[by_id[cid]], reference=a, language=lang))
            if name not in self.opened:
                self.opened[name] = scoring.open_scorer(scorers[name])
            start = time.perf_counter()
            told = None if progress is None else lambda k, before=done: progress(before + k, len(names))
            results = self.opened[name].score(items, told)
            done += len(items)
            per_row = (time.perf_counter() - start) * 1000 / max(len(items), 1)
            for i, r in zip(at, results):
                for col, value in (("candidate_id", wanted.column("candidate_id")[i].as_py()),
                                   ("problem_id", wanted.column("problem_id")[i].as_py()),
                                   ("teacher", wanted.column("teacher")[i].as_py()), ("scorer", name),
                                   ("kind", scorers[name].kind), ("value", r.value), ("label", r.label),
                                   ("status", r.status), ("n_tokens", r.n_tokens), ("truncated", r.truncated),
                                   ("detail", r.detail), ("latency_ms", per_row)):
                    rows[col].append(value)
        return pa.Table.from_pydict(rows, schema=SCORES)


def _candidates(i: Inputs) -> Iterator[pa.Table]:
    digested = "text_digest" in i.columns("candidates")
    with i.aligned({"candidates": ["candidate_id", "problem_id", "teacher", "text"] + ["text_digest"] * digested}) \
            as chunks:
        for chunk in chunks:
            yield chunk["candidates"]


STAGE = Stage("scores", VERSION, params=ScoresParams, schema=SCORES, open=Scoring, stream=_candidates,
              stream_of="candidates", shard_rows=256, compact_rows=100_000, reports=True,
              context=lambda i: {"problems": i.read("problems", _PROBLEMS)},
              rows=Rows(("candidate_id", "scorer"), _ids, _CONTENT, SCORES, {"status": ("parse_error", "truncated")}),
              resource=lambda p: _resource(p.scorers))


def _resource(scorers: tuple[ScorerConfig, ...]) -> str | None:
    """A model scorer's or judge's (``llm.models.model_resource``): the first that holds one."""
    held = (model_resource(s) if s.kind == "reward_model" else
            model_resource(s.judge) if s.kind == "judge" else None for s in scorers)
    return next((r for r in held if r), None)


def node(recipe: Recipe, problems: Ref, candidates: Ref) -> Node:
    teacher = candidates.extra.get("teacher", "")
    return STAGE.bind(ScoresParams(tuple(recipe.scorers)), {"problems": problems, "candidates": candidates},
                      label=f"scores[{teacher}]", note={"teacher": teacher})

