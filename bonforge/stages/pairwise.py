"""Stage ``pairwise``: each contender's answer (the Best-of-N pick, the fused answer, or a teacher's first
answer) against each baseline's, judged by a prompted model in both orders (game 0: the contender shown as B;
game 1: as A), for open-ended problems. Labels, their combination and the win rate:
``bonforge.scoring.pairwise``; the manifest's ``evaluation`` holds, per contender and baseline
(``"<contender> vs <baseline>"``), the outcome counts, the win rate with its seeded bootstrap interval over
prompts, the share of prompts whose two orders disagree, and how often the answer shown first won. Where the
judge is the fusor's own model and the fused answer plays, the entry says so (``warning``): the model grades
its own writing. (The judge that picked the Best-of-N answers may not judge: the recipe is refused.)

A game's content identity is the judge's settings (its model's identity, the template), the request, both
texts in their order and which of them is the contender's (its score is read from that side: the same two
texts shown in the same order with the roles swapped are another game): a rerun with one more contender asks
the judge only for the new games. A game without a verdict (``status`` other than ``ok``) is never reused."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from bonforge import identity
from bonforge.config import EvaluateConfig, FusorConfig, Recipe
from bonforge.llm.base import Request
from bonforge.llm.models import model_identity, model_resource
from bonforge.schema import PAIRWISE
from bonforge.scoring import pairwise as games
from bonforge import templates
from bonforge.stage import Inputs, Node, Params, Ref, Rows, Stage, unkeyed


VERSION = "4"  # 4: a label the judged answers carry is not the judge's own;
# 3: a game's status (a reply cut at its token limit has no label), the contender's side in the
# identity; 2: several baselines (rows keyed by baseline too), contender `fused`, evaluation per pair
SLOTS = ("{question}", "{answer_a}", "{answer_b}")
_CONTENT = ("label", "status", "n_labels", "contender_score", "prompt_tokens", "completion_tokens", "response")
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
    fusor: FusorConfig | None = unkeyed(None)  # its answers (teacher = its name) are contender `fused`

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
    side = pa.array(np.where(game == 1, "contender A", "contender B"))
    digests = identity.sha256([both.column("question"), pa.array(a, pa.string()), pa.array(b, pa.string()), side],
                              settings)[:, :identity.SIZE]
    return pa.table({"problem_id": both.column("problem_id"), "contender": both.column("contender"),
                     "game": pa.array(game), "row_id": pa.array([bytes(r) for r in digests], identity.TYPE),
                     "baseline": both.column("baseline"),
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

    def compute(self, pairs: pa.Table, todo: pa.Table | None = None, progress=None) -> pa.Table:
        """``progress(done, of)``: the games judged of those asked, as the judge's replies come."""
        cfg, j = self.params.cfg, self.params.cfg.judge
        wanted = _ids(pairs, {}, self.params) if todo is None else todo
        key = ("problem_id", "contender", "baseline")
        by_pair = {k: i for i, k in enumerate(zip(*(pairs.column(c).to_pylist() for c in key)))}
        at = pa.array([by_pair[k] for k in zip(*(wanted.column(c).to_pylist() for c in key))], pa.int64())
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
        told = None if progress is None else lambda k: progress(k, len(requests))
        replies = self.engine.generate(requests, told) if requests else []
        out = {c: [] for c in _CONTENT}
        for g, completions, x, y in zip(game, replies, a, b):
            reply = completions[0] if completions else None
            label, n, status = games.read_reply(reply, f"{x}\n{y}")
            for col, value in (("label", label), ("status", status), ("n_labels", n),
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


def _system(system: str, fusor: FusorConfig | None) -> tuple[str, list]:
    """SQL of a system's answer per problem (problem_id, candidate_id), and its parameters."""
    if system == "bon":
        return "SELECT problem_id, candidate_id FROM bon WHERE pool = '*' AND candidate_id IS NOT NULL", []
    teacher = fusor.name if system == "fused" else system.removeprefix("teacher:")
    return "SELECT problem_id, candidate_id FROM candidates WHERE teacher = ? AND sample_index = 0", [teacher]


def _pairs(i: Inputs) -> pa.Table:
    """One row per (problem, contender, baseline) where both answers exist, in problem order."""
    cfg: EvaluateConfig = i.params.cfg
    parts = []
    for baseline in cfg.baselines:
        for contender in (c for c in cfg.contenders if c != baseline):
            (con, con_args), (base, base_args) = _system(contender, i.params.fusor), _system(baseline, i.params.fusor)
            t = i.sql(
                "SELECT p.problem_id, p.question, k.candidate_id AS contender_id, c.text AS contender_text, "
                f"j.candidate_id AS baseline_id, b.text AS baseline_text FROM ({con}) k JOIN ({base}) j "
                "USING (problem_id) JOIN candidates c ON c.candidate_id = k.candidate_id "
                "JOIN candidates b ON b.candidate_id = j.candidate_id JOIN problems p ON p.problem_id = k.problem_id "
                "WHERE c.text IS NOT NULL AND b.text IS NOT NULL", con_args + base_args)
            parts.append(t.append_column("contender", pa.array([contender] * t.num_rows, pa.string()))
                          .append_column("baseline", pa.array([baseline] * t.num_rows, pa.string())))
    return pa.concat_tables(parts).sort_by([("problem_id", "ascending"), ("contender", "ascending"),
                                            ("baseline", "ascending")])


def evaluation(table: pa.Table, cfg: EvaluateConfig, fusor: FusorConfig | None = None) -> dict:
    """Per contender and baseline: the outcome counts, the win rate and its interval, the share of
    inconsistent prompts, and how often the answer shown first (A) won a decisive game."""
    out = {}
    rows = table.to_pylist()
    for contender, baseline in sorted({(r["contender"], r["baseline"]) for r in rows}):
        mine = [r for r in rows if r["contender"] == contender and r["baseline"] == baseline]
        entry = {"contender": contender, "baseline": baseline, **games.summary(mine, cfg)}
        if fusor is not None and fusor.model == cfg.judge.model and "fused" in (contender, baseline):
            entry["warning"] = (f"the judge ({cfg.judge.model}) is the fusor's model: it grades its own fused "
                                "answers")
        out[f"{contender} vs {baseline}"] = entry
    return out


STAGE = Stage("pairwise", VERSION, params=PairwiseParams, schema=PAIRWISE, open=Judging, table=_pairs,
              shard_rows=512, resource=lambda p: model_resource(p.cfg.judge), reports=True,
              summary=lambda w: {"evaluation": evaluation(w.read(), w.node.params.cfg, w.node.params.fusor)},
              rows=Rows(("problem_id", "contender", "baseline", "game"), _ids, _CONTENT, PAIRWISE,
                        {"status": games.FAILED}))


def node(recipe: Recipe, problems: Ref, candidates: list[Ref], bon: Ref) -> Node:
    """``candidates``: the teachers' and, with fusion, the fused answers."""
    fusor = recipe.fusion.fusor if recipe.fusion else None
    return STAGE.bind(PairwiseParams(recipe.evaluate, fusor), {"problems": problems, "candidates": candidates,
                                                                "bon": bon})
