"""FusioN stages.

* ``fusion_pools`` — per problem, a pool of candidates drawn from several teachers (counts from the recipe),
  shuffled with a seed derived from the recipe seed and the problem id; the seed and the positions are
  recorded. The fusion prompt is rendered here from a template file.
* the fused answers are an ordinary ``candidates`` stage (the fusor is a sampling teacher reading the
  rendered prompts through a pass-through template), verified by the ordinary ``verdicts`` stage.
* ``fusion`` — per problem: the fused answer's verdict beside best-of-N baselines on the same pool
  (oracle = pass@N, majority vote, a random pick) and the contribution analysis of the fused text
  (per teacher, per pool position; see ``bonforge.selection.attribution``).
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import re
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa

from bonforge import templates
from bonforge.selection import judged_pool, prompts, selector
from bonforge.selection.best_of_n import excluded, ok_values
from bonforge.selection.attribution import MULTIPLE, UNMATCHED, attribute, counts
from bonforge.config import BonFilter, FusionConfig, FusionExport, GenSelectConfig, Recipe
from bonforge.llm.config import SampledTeacher
from bonforge.selection.metrics import majority_at_k
from bonforge.schema import FUSION, FUSION_POOLS, SELECTOR_EVAL
from bonforge.selection.selector import Selector, selector_key
from bonforge.stage import Inputs, Node, Params, Ref, Stage
from bonforge.selection.sft import sft_messages

POOLS_VERSION = "2"  # 2: the rendered pool is column `prompt` (was `question`, which held no question)
FUSION_VERSION = "1"
SELECT_VERSION = "1"
PASSTHROUGH = templates.HERE / "passthrough.txt"
OPEN_GUIDANCE = ("\n\nWrite one answer in the language of the request. Keep what the responses get right and "
                 "support, drop what they get wrong, and add no unsafe or invented content.")
GUIDANCE = ("\n\nBe careful with the result: check every computation before you commit to it, keep the "
            "answer self-contained, state the final answer clearly, and do not add unsafe or invented "
            "content that none of the responses supports.")

def template_text(cfg: FusionConfig) -> str:
    return templates.load(cfg.template, "fusion.txt", ("{question}", "{candidates}"), "fusion.template")


def pools_key_config(cfg: FusionConfig) -> dict:
    out = {k: v for k, v in cfg.key_config().items() if k not in ("fusor", "selector", "export", "min_span")}
    out["template"] = hashlib.sha256(template_text(cfg).encode()).hexdigest()
    return out


def pool_seed(seed: int, problem_id: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{problem_id}".encode()).digest()[:6], "big")


def render(template: str, question: str, texts: list[str], guidance: str) -> str:
    """Fill the template's slots in one pass (braces inside the texts, e.g. LaTeX, stay as they are)."""
    values = {
        "question": question.strip(), "n": str(len(texts)), "guidance": guidance,
        "candidates": "\n\n".join(f"### Response {i}\n{t.strip()}" for i, t in enumerate(texts)),
    }
    return re.sub(r"\{(question|candidates|n|guidance)\}", lambda m: values[m.group(1)], template)


def _kept(c: dict, cfg: FusionConfig, hard_filter: BonFilter | None) -> bool:
    """A candidate may enter a pool: it has a text of ``min_chars``, and a verdict status the prefilter keeps
    (verified domains) or scores the hard filter keeps (open-ended: ``scores``, scorer -> value)."""
    if not c["text"] or len(c["text"]) < cfg.prefilter.min_chars:
        return False
    if hard_filter is not None:
        return excluded(dict(c["scores"] or []), hard_filter) is None
    return c["status"] not in cfg.prefilter.drop_statuses


def build_pools(pool: pa.Table, cfg: FusionConfig, hard_filter: BonFilter | None = None) -> pa.Table:
    """FUSION_POOLS rows from ``pool`` (candidates joined with problems and verdicts: problem_id, question,
    domain, candidate_id, teacher, text, status; open-ended: with ``scores`` instead of ``status``), a shard of
    whole problems."""
    template = template_text(cfg)
    t = pool.sort_by([("problem_id", "ascending"), ("candidate_id", "ascending")])
    rows = []
    by_problem: dict[str, list[dict]] = {}
    for r in t.to_pylist():
        by_problem.setdefault(r["problem_id"], []).append(r)
    for pid, cands in by_problem.items():
        seed = pool_seed(cfg.seed, pid)
        rng = random.Random(seed)
        chosen = []
        for teacher, count in sorted(cfg.teachers.items()):
            mine = [c for c in cands if c["teacher"] == teacher and _kept(c, cfg, hard_filter)]
            chosen += rng.sample(mine, min(count, len(mine)))
        if cfg.n is not None and len(chosen) > cfg.n:
            chosen = rng.sample(chosen, cfg.n)
        rng.shuffle(chosen)
        if not chosen:
            continue
        rows.append({
            "problem_id": pid, "domain": cands[0]["domain"], "pool_seed": seed,
            "candidate_ids": [c["candidate_id"] for c in chosen], "teachers": [c["teacher"] for c in chosen],
            "prompt": render(template, cands[0]["question"], [c["text"] for c in chosen],
                             "" if not cfg.guidance else OPEN_GUIDANCE if hard_filter else GUIDANCE),
        })
    return pa.Table.from_pylist(rows, schema=FUSION_POOLS)


def fusor_teacher(cfg: FusionConfig):
    """The fusor as a sampling teacher: one sample per pool, prompt = the rendered pool as it is."""
    return cfg.fusor.model_copy(update={"prompt_template": str(PASSTHROUGH), "n": 1})


POOL_ROWS = pa.schema([  # what the analysis reads of a pool: one row each (``_pool_rows``)
    ("problem_id", pa.string()), ("candidate_ids", pa.list_(pa.string())), ("teachers", pa.list_(pa.string())),
    ("texts", pa.list_(pa.string())), ("correct", pa.list_(pa.bool_())), ("extracted", pa.list_(pa.string())),
    ("fused_candidate_id", pa.string()), ("fused_text", pa.string()), ("fused_correct", pa.bool_()),
    ("fused_status", pa.string()), ("genselect", pa.bool_()),
])


def analyze(pools: pa.Table, min_span: int) -> pa.Table:
    """FUSION rows from ``POOL_ROWS``: each pool's members (in pool order: teachers, texts, verdicts), its
    fused answer with the verdict on it (null: none) and the selector's verdict on the pool (null: none)."""
    rows = []
    for p in pools.to_pylist():
        text = p["fused_text"] or ""
        texts = [t or "" for t in p["texts"]]
        by_teacher = counts(attribute(text, list(zip(p["teachers"], texts)), min_span))
        by_pos = counts(attribute(text, [(f"{i:04d}", t) for i, t in enumerate(texts)], min_span))
        correct = [bool(c) for c in p["correct"]]
        rows.append({
            "problem_id": p["problem_id"],
            "fused_candidate_id": p["fused_candidate_id"],
            "fused_correct": bool(p["fused_correct"]),
            "fused_status": p["fused_status"],
            "pool_size": len(texts),
            "oracle": float(any(correct)),
            "majority": majority_at_k(p["extracted"], correct, len(texts), p["problem_id"]),
            "random": float(np.mean(correct)),
            "genselect": None if p["genselect"] is None else float(p["genselect"]),
            "total_chars": len(text),
            "teacher_chars": sorted(by_teacher.items()),
            "position_chars": [by_pos.get(f"{i:04d}", 0) for i in range(len(texts))],
            "position_multiple": by_pos.get(MULTIPLE, 0),
            "position_unmatched": by_pos.get(UNMATCHED, 0),
        })
    return pa.Table.from_pylist(rows, schema=FUSION)


def comparison(fusion: pa.Table) -> dict:
    """Accuracy of fused answers against best-of-N selection rules on the same pools."""
    n = fusion.num_rows
    if n == 0:
        return {"problems": 0}
    col = lambda name: [v for v in fusion.column(name).to_pylist() if v is not None]  # noqa: E731
    chars: dict[str, int] = {}
    for m in fusion.column("teacher_chars").to_pylist():
        for k, v in m or []:
            chars[k] = chars.get(k, 0) + v
    total = sum(chars.values()) or 1
    majority, genselect = col("majority"), col("genselect")
    return {
        "problems": n,
        "fused": float(np.mean([bool(x) for x in col("fused_correct")])),
        "oracle_pass_at_n": float(np.mean(col("oracle"))),
        "majority_vote": float(np.mean(majority)) if majority else None,
        "random_pick": float(np.mean(col("random"))),
        "genselect": float(np.mean(genselect)) if genselect else None,
        "contribution_fraction": {k: round(v / total, 4) for k, v in sorted(chars.items())},
    }


def selection_prompts(pools: pa.Table, members: pa.Table, questions: dict[str, str], cfg) -> pa.Table:
    """One GenSelect prompt per pool, candidates in pool order (the input of ``selector.Selector``)."""
    template = prompts.template_text(cfg)
    count, _ = prompts.token_counter(cfg)
    info = {r["candidate_id"]: r for r in members.to_pylist()}
    rows = []
    pools = pools.to_pylist()
    members = [[info[c] for c in p["candidate_ids"]] for p in pools]
    rendered = prompts.render_all(template, [questions[p["problem_id"]] for p in pools],
                                   [[c["text"] or "" for c in cands] for cands in members])
    for p, cands, prompt in zip(pools, members, rendered):
        rows.append({"prompt_id": f"{p['problem_id']}#fusion", "problem_id": p["problem_id"], "prompt": prompt,
                     "n_candidates": len(cands), "n_tokens": count(prompt),
                     "correct_indices": [i for i, c in enumerate(cands) if c["correct"]],
                     "answer_groups": prompts.answer_groups([c["extracted"] for c in cands])})
    return pa.Table.from_pylist(rows, schema=prompts.SELECTION)


def sft_tables(fused: pa.Table, only_correct: bool) -> dict[str, pa.Table]:
    """TRL ``messages`` and a plain table of fused answers (``fused``: problem_id, question, candidate_id,
    text, correct)."""
    rows = [r for r in fused.sort_by("problem_id").to_pylist() if r["correct"] or not only_correct]
    plain = pa.Table.from_pylist(
        [{k: r[k] for k in ("problem_id", "question", "candidate_id", "text", "correct")} for r in rows],
        schema=pa.schema([("problem_id", pa.string()), ("question", pa.string()), ("candidate_id", pa.string()),
                          ("text", pa.string()), ("correct", pa.bool_())]))
    return {"trl": sft_messages(plain, {"problem_id": pa.string()}), "plain": plain}


# -- the stages -------------------------------------------------------------------------------------------
_POOL = {"problem_id": "candidates", "question": "problems", "domain": "problems", "candidate_id": "candidates",
         "teacher": "candidates", "text": "candidates", "status": "verdicts"}


def _pool_candidates(i: Inputs) -> Iterator[pa.Table]:
    """The candidates of the fusion teachers (of the kept problems only, with ``problems: kept``), in chunks
    of whole problems."""
    return judged_pool.chunks(i, _POOL, teachers=sorted(i.params.cfg.teachers))


def _open_pool_candidates(i: Inputs) -> pa.Table:
    """Open-ended problems: the fusion teachers' candidates with their problem and their scores (status ok),
    whole problems in problem order (the scores hold no texts; the candidates are read once)."""
    teachers = sorted(i.params.cfg.teachers)
    table = i.sql("SELECT c.problem_id, p.question, p.domain, c.candidate_id, c.teacher, c.text "
                  "FROM candidates c JOIN problems p USING (problem_id) WHERE list_contains($1, c.teacher) "
                  "ORDER BY c.problem_id, c.candidate_id", [teachers])
    ok = ok_values(i.sql("SELECT candidate_id, scorer, value, status FROM scores").to_pylist())
    scores = [sorted(ok.get(c, {}).items()) for c in table.column("candidate_id").to_pylist()]
    return table.append_column("scores", pa.array(scores, pa.map_(pa.string(), pa.float64())))


@dataclass(frozen=True)
class PoolsParams(Params):
    cfg: FusionConfig
    hard_filter: BonFilter | None = None  # open-ended problems: the candidates bon.filter keeps

    def key_config(self) -> dict:
        keyed = pools_key_config(self.cfg)
        return keyed if self.hard_filter is None else {**keyed, "hard_filter": self.hard_filter.key_config()}


POOLS_STAGE = Stage("fusion_pools", POOLS_VERSION, params=PoolsParams, schema=FUSION_POOLS, compute=build_pools,
                    stream=_pool_candidates, shard_rows=50_000)


def pools_node(recipe: Recipe, problems: Ref, candidates: list[Ref], verdicts: list[Ref], stats: Ref) -> Node:
    cfg = recipe.fusion
    return POOLS_STAGE.bind(PoolsParams(cfg), {
        "problems": problems, "candidates": candidates, "verdicts": verdicts,
        "problem_stats": stats if cfg.problems == "kept" else None,
    })  # fmt: skip


def open_pools_node(recipe: Recipe, problems: Ref, candidates: list[Ref], scores: list[Ref]) -> Node:
    """Open-ended problems: pools drawn from the candidates the hard filter (``bon.filter``) keeps."""
    return POOLS_STAGE.bind(PoolsParams(recipe.fusion, recipe.bon.filter),
                            {"problems": problems, "candidates": candidates, "scores": scores},
                            stream=None, table=_open_pool_candidates)


def _members(i: Inputs, *columns: str) -> pa.Table:
    return i.sql(f"SELECT c.candidate_id, {', '.join(columns)} FROM candidates c JOIN verdicts v USING (candidate_id)")


def _selection_prompts(i: Inputs) -> pa.Table:
    members = _members(i, "c.text", "v.correct", "v.extracted")
    problems = i.read("problems", ["problem_id", "question"])
    questions = dict(zip(problems.column("problem_id").to_pylist(), problems.column("question").to_pylist()))
    return selection_prompts(i.read("fusion_pools"), members, questions, i.params.genselect)


@dataclass(frozen=True)
class SelectParams(Params):
    selector: SampledTeacher
    genselect: GenSelectConfig
    seed: int

    def key_config(self) -> dict:
        return {"selector": selector_key(self.selector), "genselect": prompts.key_config(self.genselect, self.seed)}


def _selector(p: SelectParams) -> contextlib.closing:
    return contextlib.closing(Selector(p.selector, runs=1, skip_unanimous=False))


SELECT_STAGE = Stage("fusion_select", SELECT_VERSION, params=SelectParams, schema=SELECTOR_EVAL, open=_selector,
                     table=_selection_prompts, reports=True, summary=selector.spent,
                     rows=selector.rows(lambda p: (p.selector, 1, False)))  # a pool selected before: not asked


def select_node(recipe: Recipe, problems: Ref, pools: Ref, candidates: list[Ref], verdicts: list[Ref]) -> Node:
    """The configured selector picks one candidate of each fusion pool (GenSelect on the same pools)."""
    upstream = {"fusion_pools": pools, "candidates": candidates, "verdicts": verdicts}
    return SELECT_STAGE.bind(SelectParams(recipe.fusion.selector, recipe.genselect, recipe.seed), upstream,
                             inputs={**upstream, "problems": problems})


_ANALYSIS_READS = {"candidates": ["problem_id", "candidate_id", "teacher", "text"],  # first: texts drive
                   "verdicts": ["problem_id", "candidate_id", "correct", "extracted"],
                   "fusion_pools": ["problem_id", "candidate_ids"], "fused": ["problem_id", "candidate_id", "text"],
                   "fused_verdicts": ["problem_id", "candidate_id", "correct", "status"],
                   "fusion_select": ["problem_id", "correct"]}


def _analysis_chunks(i: Inputs) -> Iterator[pa.Table]:
    """``POOL_ROWS`` of the pools, in chunks of whole problems read side by side from every input (a chunk
    ends where a batch of candidate texts does): no input is ever whole in memory."""
    with i.aligned({name: cols for name, cols in _ANALYSIS_READS.items() if name in i}) as stream:
        for chunk in stream:
            yield _pool_rows(chunk)


def _pool_rows(c: dict[str, pa.Table]) -> pa.Table:
    def by(table: pa.Table, key: str) -> dict:
        return {r[key]: r for r in table.to_pylist()}

    members = by(c["candidates"].join(c["verdicts"].drop_columns(["problem_id"]), "candidate_id"), "candidate_id")
    fused = by(c["fused"].join(c["fused_verdicts"].drop_columns(["problem_id"]), "candidate_id"), "problem_id")
    picked = by(c["fusion_select"], "problem_id") if "fusion_select" in c else {}
    rows = []
    for pool in c["fusion_pools"].to_pylist():
        m = [members[cid] for cid in pool["candidate_ids"]]
        f, pick = fused.get(pool["problem_id"], {}), picked.get(pool["problem_id"], {})
        rows.append({**pool, "teachers": [x["teacher"] for x in m], "texts": [x["text"] for x in m],
                     "correct": [x["correct"] for x in m], "extracted": [x["extracted"] for x in m],
                     "fused_candidate_id": f.get("candidate_id"), "fused_text": f.get("text"),
                     "fused_correct": f.get("correct"), "fused_status": f.get("status"),
                     "genselect": pick.get("correct")})
    return pa.Table.from_pylist(rows, schema=POOL_ROWS)


@dataclass(frozen=True)
class FusionParams(Params):
    min_span: int


FUSION_STAGE = Stage("fusion", FUSION_VERSION, params=FusionParams, schema=FUSION, compute=analyze,
                     stream=_analysis_chunks,
                     shard_rows=50_000, shard_bytes=64 << 20, summary=lambda w: {"comparison": comparison(w.read())})


def fusion_node(recipe: Recipe, pools: Ref, candidates: list[Ref], verdicts: list[Ref], fused: Ref,
                fused_verdicts: Ref, selection: Ref | None) -> Node:
    upstream = {"fusion_pools": pools, "candidates": candidates, "verdicts": verdicts, "fused": fused,
                "fused_verdicts": fused_verdicts, "fusion_select": selection}
    inputs = {**upstream, "candidates": candidates + [fused], "verdicts": verdicts + [fused_verdicts]}
    return FUSION_STAGE.bind(FusionParams(recipe.fusion.min_span), upstream, inputs=inputs)


def sft_parts(i: Inputs, cfg: FusionExport) -> dict[str, pa.Table]:
    """The SFT dataset of the fused answers (``i``: problems, the fused candidates and their verdicts)."""
    table = i.sql("SELECT c.problem_id, p.question, c.candidate_id, c.text, v.correct FROM candidates c "
                  "JOIN verdicts v USING (candidate_id) JOIN problems p ON p.problem_id = c.problem_id")
    return sft_tables(table, cfg.only_correct)
