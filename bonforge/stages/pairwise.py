"""Stage ``pairwise``: each contender's answer (the Best-of-N pick, or a teacher's first answer) against the
baseline's, judged by a prompted model in both orders (game 0: the contender shown as B; game 1: as A), for
open-ended problems. Labels, their combination and the win rate: ``bonforge.scoring.pairwise``; the manifest's
``evaluation`` holds, per contender, the outcome counts, the win rate with its seeded bootstrap interval over
prompts, the share of prompts whose two orders disagree, and how often the answer shown first won.

A game's content identity is the judge's settings (its model's identity, the template) and the request and
both texts in their order: a rerun with one more contender asks the judge only for the new games."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from bonforge import identity
from bonforge.config import EvaluateConfig, Recipe
from bonforge.llm.base import Request
from bonforge.llm.models import model_identity
from bonforge.schema import PAIRWISE
from bonforge.scoring import pairwise as games
from bonforge.selection import templates
from bonforge.stage import Inputs, Node, Params, Ref, Rows, Stage

VERSION = "1"
SLOTS = ("{question}", "{answer_a}", "{answer_b}")
_CONTENT = ("label", "n_labels", "contender_score", "prompt_tokens", "completion_tokens", "response")
_SLOT = r"\{(question|answer_a|answer_b)\}"


def load_template(cfg: EvaluateConfig) -> str:
    return templates.load(cfg.template, "judge_pairwise.txt", SLOTS, "evaluate.template")


def judge_settings(cfg: EvaluateConfig) -> dict:
    j = cfg.judge
    return {"judge": {**{k: v for k, v in j.key_config().items() if k not in ("name", "n")},
                      "model": model_identity(j.model, j.revision)},
            "template_sha256": hashlib.sha256(load_template(cfg).encode()).hexdigest()}


@dataclass(frozen=True)
class PairwiseParams(Params):
    cfg: EvaluateConfig

    def key_config(self) -> dict:
        c = self.cfg
        return {"games": judge_settings(c), "baseline": c.baseline, "contenders": c.contenders,
                "bootstrap": [c.bootstrap_rounds, c.seed, c.level]}


def _texts(pairs: pa.Table, game: np.ndarray) -> tuple[list, list]:
    """Each game's (answer A, answer B)."""
    con, base = pairs.column("contender_text").to_pylist(), pairs.column("baseline_text").to_pylist()
    a = [c if g else b for c, b, g in zip(con, base, game)]
    b = [b if g else c for c, b, g in zip(con, base, game)]
    return a, b


def _ids(pairs: pa.Table, _context: dict, params: PairwiseParams) -> pa.Table:
    """Two games per pair, in pair order."""
    pick = pa.array(np.repeat(np.arange(pairs.num_rows), 2))
    both = pairs.take(pick)
    game = np.tile([0, 1], pairs.num_rows).astype(np.int32)
    a, b = _texts(both, game)
    settings = identity.settings("pairwise", {"stage": VERSION, **judge_settings(params.cfg)})
    digests = identity.sha256([both.column("question"), pa.array(a, pa.string()), pa.array(b, pa.string())],
                              settings)[:, :identity.SIZE]
    return pa.table({"problem_id": both.column("problem_id"), "contender": both.column("contender"),
                     "game": pa.array(game), "row_id": pa.array([bytes(r) for r in digests], identity.TYPE),
                     "baseline": pa.array([params.cfg.baseline] * both.num_rows, pa.string()),
                     "contender_id": both.column("contender_id"), "baseline_id": both.column("baseline_id")})


class Judging:
    def __init__(self, params: PairwiseParams) -> None:
        self.params = params
        self.engine = None

    def __enter__(self):
        return self.compute

    def __exit__(self, *exc) -> None:
        if self.engine is not None:
            self.engine.close()

    def compute(self, pairs: pa.Table, todo: pa.Table | None = None) -> pa.Table:
        cfg, j = self.params.cfg, self.params.cfg.judge
        wanted = _ids(pairs, {}, self.params) if todo is None else todo
        by_pair = {(p, c): i for i, (p, c) in enumerate(zip(pairs.column("problem_id").to_pylist(),
                                                            pairs.column("contender").to_pylist()))}
        at = pa.array([by_pair[(p, c)] for p, c in zip(wanted.column("problem_id").to_pylist(),
                                                       wanted.column("contender").to_pylist())], pa.int64())
        rows = pairs.take(at)
        game = np.asarray(wanted.column("game").to_pylist(), np.int32)
        a, b = _texts(rows, game)
        template = load_template(cfg)
        requests = [Request(id=str(i), messages=({"role": "user", "content": fill_pair(template, q, x, y)},), n=1,
                            temperature=j.temperature, top_p=j.top_p, max_tokens=j.max_tokens, seed=j.seed)
                    for i, (q, x, y) in enumerate(zip(rows.column("question").to_pylist(), a, b))]
        if requests and self.engine is None:
            from bonforge.llm import make_engine

            self.engine = make_engine(j)
            self.engine.start()
        replies = self.engine.generate(requests) if requests else []
        out = {c: [] for c in _CONTENT}
        for g, completions in zip(game, replies):
            reply = completions[0] if completions else None
            label, n = games.parse_label(reply.text) if reply else (None, 0)
            for col, value in (("label", label), ("n_labels", n),
                               ("contender_score", games.contender_score(label, contender_is_a=bool(g))),
                               ("prompt_tokens", reply and reply.prompt_tokens),
                               ("completion_tokens", reply and reply.completion_tokens),
                               ("response", reply.text[-4000:] if reply else None)):
                out[col].append(value)
        return pa.table({**{f: wanted.column(f) for f in ("problem_id", "contender", "baseline", "game",
                                                         "contender_id", "baseline_id")}, **out}).cast(PAIRWISE)


def fill_pair(template: str, question: str, answer_a: str, answer_b: str) -> str:
    """Every slot replaced in one pass (an answer that contains ``{answer_b}`` stays as it is)."""
    values = {"question": question, "answer_a": answer_a, "answer_b": answer_b}
    return re.sub(_SLOT, lambda m: values[m.group(1)], template)


def _pairs(i: Inputs) -> pa.Table:
    """One row per (problem, contender) where both answers exist, in problem order."""
    cfg: EvaluateConfig = i.params.cfg
    base = cfg.baseline.removeprefix("teacher:")
    parts = []
    for contender in cfg.contenders:
        if contender == "bon":
            pick = "SELECT problem_id, candidate_id FROM bon WHERE pool = '*' AND candidate_id IS NOT NULL"
            params: list = [base]
        else:
            pick = "SELECT problem_id, candidate_id FROM candidates WHERE teacher = $2 AND sample_index = 0"
            params = [base, contender.removeprefix("teacher:")]
        parts.append(i.sql(
            "SELECT p.problem_id, p.question, k.candidate_id AS contender_id, c.text AS contender_text, "
            "b.candidate_id AS baseline_id, "
            f"b.text AS baseline_text FROM ({pick}) k JOIN candidates c USING (candidate_id) "
            "JOIN problems p ON p.problem_id = k.problem_id "
            "JOIN candidates b ON b.problem_id = k.problem_id AND b.teacher = $1 AND b.sample_index = 0 "
            "WHERE c.text IS NOT NULL AND b.text IS NOT NULL", params))
    tables = [t.append_column("contender", pa.array([c] * t.num_rows, pa.string()))
              for c, t in zip(cfg.contenders, parts)]
    table = pa.concat_tables(tables)
    return table.sort_by([("problem_id", "ascending"), ("contender", "ascending")])


def evaluation(table: pa.Table, cfg: EvaluateConfig) -> dict:
    """Per contender: the outcome counts, the win rate and its interval, the share of inconsistent prompts,
    and how often the answer shown first (A) won a decisive game."""
    out = {}
    rows = table.to_pylist()
    for contender in sorted({r["contender"] for r in rows}):
        per: dict[str, dict[int, float | None]] = {}
        first_won = decisive = 0
        for r in rows:
            if r["contender"] != contender:
                continue
            per.setdefault(r["problem_id"], {})[r["game"]] = r["contender_score"]
            if r["label"] in ("A>>B", "A>B", "B>A", "B>>A"):
                decisive += 1
                first_won += r["label"].startswith("A>")
        counts = {k: 0 for k in ("win", "tie", "loss", "inconsistent", "split", "invalid")}
        scores = []
        for g in per.values():
            kind, score = games.outcome(g.get(0), g.get(1))
            counts[kind] += 1
            if score is not None:
                scores.append(score)
        rate = games.win_rate(scores, cfg.bootstrap_rounds, cfg.seed, cfg.level)
        valid = len(scores)
        out[contender] = {"baseline": cfg.baseline, **counts, **rate,
                          "inconsistent_rate": counts["inconsistent"] / valid if valid else None,
                          "first_shown_wins": first_won / decisive if decisive else None}
    return out


STAGE = Stage("pairwise", VERSION, params=PairwiseParams, schema=PAIRWISE, open=Judging, table=_pairs,
              shard_rows=512, summary=lambda w: {"evaluation": evaluation(w.read(), w.node.params.cfg)},
              rows=Rows(("problem_id", "contender", "game"), _ids, _CONTENT, PAIRWISE))


def node(recipe: Recipe, problems: Ref, candidates: list[Ref], bon: Ref) -> Node:
    return STAGE.bind(PairwiseParams(recipe.evaluate), {"problems": problems, "candidates": candidates, "bon": bon})
