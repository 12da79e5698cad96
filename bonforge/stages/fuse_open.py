"""Stage ``fusion_open``: FusioN on open-ended problems. Per pool (``fusion_pools``, drawn from the answers the
hard filter keeps), the fused answer's scores (the same scorers as every candidate: ``scores`` of the fusor's
candidates) beside Best-of-N on the same pool by the selection scorer (``bon.scorer``; ties: the lowest
candidate_id), the pool's best and mean score per scorer, whether the hard filter keeps the fused answer, and
the contribution analysis of the fused text (per teacher and pool position, ``bonforge.selection.attribution``).

The manifest's ``comparison`` holds per scorer the mean of the fused answers, of the Best-of-N picks and of the
pools, and how often the fused answer scores at least as high as the pick. The selection scorer's row is marked
``selection: true``: Best-of-N maximises that scorer on the pool by construction, so it is no fair judge of
fused against picked answers (the pairwise stage, with another judge, is)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from bonforge.config import BonFilter, Recipe
from bonforge.schema import FUSION_OPEN
from bonforge.selection.attribution import MULTIPLE, UNMATCHED, attribute, counts
from bonforge.selection.best_of_n import excluded, ok_values, pick
from bonforge.stage import Inputs, Node, Params, Ref, Stage
from bonforge.selection.sft import sft_messages

VERSION = "1"

POOL_ROWS = pa.schema([  # what the analysis reads of a pool: one row each (``_pool_rows``)
    ("problem_id", pa.string()), ("candidate_ids", pa.list_(pa.string())), ("teachers", pa.list_(pa.string())),
    ("texts", pa.list_(pa.string())), ("values", pa.list_(pa.map_(pa.string(), pa.float64()))),
    ("fused_candidate_id", pa.string()), ("fused_text", pa.string()),
    ("fused_values", pa.map_(pa.string(), pa.float64())),
])


def analyze(pools: pa.Table, scorer: str, hard_filter: BonFilter, min_span: int) -> pa.Table:
    """FUSION_OPEN rows from ``POOL_ROWS``: each pool's members (in pool order: teachers, texts, their scores)
    and its fused answer with its scores (null: the fusor gave none)."""
    rows = []
    for p in pools.to_pylist():
        texts = [t or "" for t in p["texts"]]
        values = [dict(v or []) for v in p["values"]]
        fused = dict(p["fused_values"] or [])
        text = p["fused_text"] or ""
        by_teacher = counts(attribute(text, list(zip(p["teachers"], texts)), min_span))
        by_pos = counts(attribute(text, [(f"{i:04d}", t) for i, t in enumerate(texts)], min_span))
        ranked = {c: v[scorer] for c, v in zip(p["candidate_ids"], values) if scorer in v}
        bon = pick(ranked)[0] if ranked else None
        names = sorted({s for v in values for s in v})
        rows.append({
            "problem_id": p["problem_id"], "fused_candidate_id": p["fused_candidate_id"],
            "fused_kept": None if p["fused_candidate_id"] is None else excluded(fused, hard_filter) is None,
            "pool_size": len(texts), "scorer": scorer, "bon_candidate_id": bon,
            "fused_values": sorted(fused.items()),
            "bon_values": sorted(values[p["candidate_ids"].index(bon)].items()) if bon else None,
            "pool_max": [(s, max(v[s] for v in values if s in v)) for s in names],
            "pool_mean": [(s, float(np.mean([v[s] for v in values if s in v]))) for s in names],
            "total_chars": len(text), "teacher_chars": sorted(by_teacher.items()),
            "position_chars": [by_pos.get(f"{i:04d}", 0) for i in range(len(texts))],
            "position_multiple": by_pos.get(MULTIPLE, 0), "position_unmatched": by_pos.get(UNMATCHED, 0),
        })
    return pa.Table.from_pylist(rows, schema=FUSION_OPEN)


def comparison(table: pa.Table, scorer: str) -> dict:
    """Per scorer, over the pools with a fused answer and a pick both scored by it: the mean of the fused
    answers, of the picks and of the pools, and the share where the fused answer scores at least the pick's."""
    rows = [r for r in table.to_pylist() if r["fused_candidate_id"] is not None]
    if not rows:
        return {"problems": table.num_rows, "fused": 0}
    per: dict[str, dict[str, list]] = {}
    for r in rows:
        fused, bon, mean = (dict(r[c] or []) for c in ("fused_values", "bon_values", "pool_mean"))
        for s in sorted(set(fused) & set(bon)):
            d = per.setdefault(s, {"fused": [], "bon": [], "pool": []})
            d["fused"].append(fused[s])
            d["bon"].append(bon[s])
            d["pool"].append(mean[s])
    chars: dict[str, int] = {}
    for r in rows:
        for k, v in r["teacher_chars"] or []:
            chars[k] = chars.get(k, 0) + v
    total = sum(chars.values()) or 1
    return {
        "problems": table.num_rows, "fused": len(rows),
        "fused_kept": float(np.mean([bool(r["fused_kept"]) for r in rows])),
        "selection_scorer": scorer,
        "scorers": {s: {"n": len(d["fused"]), "fused_mean": float(np.mean(d["fused"])),
                        "bon_mean": float(np.mean(d["bon"])), "pool_mean": float(np.mean(d["pool"])),
                        "fused_at_least_bon": float(np.mean(np.asarray(d["fused"]) >= np.asarray(d["bon"]))),
                        "selection": s == scorer} for s, d in per.items()},
        "contribution_fraction": {k: round(v / total, 4) for k, v in sorted(chars.items())},
    }


def _values(i: Inputs, view: str) -> dict[str, dict[str, float]]:
    return ok_values(i.sql(f"SELECT candidate_id, scorer, value, status FROM {view}").to_pylist())


def _pool_rows(i: Inputs) -> pa.Table:
    """``POOL_ROWS`` of every pool in problem order (pool members' texts only: the candidates outside the
    pools are not read)."""
    pools = i.sql("SELECT problem_id, candidate_ids FROM fusion_pools ORDER BY problem_id").to_pylist()
    members = i.sql("SELECT candidate_id, teacher, text FROM candidates WHERE candidate_id IN "
                    "(SELECT unnest(candidate_ids) FROM fusion_pools)").to_pylist()
    info = {m["candidate_id"]: m for m in members}
    fused = {r["problem_id"]: r for r in i.sql("SELECT problem_id, candidate_id, text FROM fused").to_pylist()}
    values, fused_values = _values(i, "scores"), _values(i, "fused_scores")
    rows = []
    for p in pools:
        ids, f = p["candidate_ids"], fused.get(p["problem_id"], {})
        rows.append({"problem_id": p["problem_id"], "candidate_ids": ids,
                     "teachers": [info[c]["teacher"] for c in ids], "texts": [info[c]["text"] for c in ids],
                     "values": [sorted(values.get(c, {}).items()) for c in ids],
                     "fused_candidate_id": f.get("candidate_id"), "fused_text": f.get("text"),
                     "fused_values": sorted(fused_values.get(f.get("candidate_id"), {}).items())})
    return pa.Table.from_pylist(rows, schema=POOL_ROWS)


@dataclass(frozen=True)
class OpenFusionParams(Params):
    scorer: str
    hard_filter: BonFilter
    min_span: int


STAGE = Stage("fusion_open", VERSION, params=OpenFusionParams, schema=FUSION_OPEN, compute=analyze,
              table=_pool_rows, shard_rows=50_000,
              summary=lambda w: {"comparison": comparison(w.read(), w.node.params.scorer)})


def node(recipe: Recipe, pools: Ref, candidates: list[Ref], scores: list[Ref], fused: Ref, fused_scores: Ref) -> Node:
    upstream = {"fusion_pools": pools, "candidates": candidates, "scores": scores, "fused": fused,
                "fused_scores": fused_scores}
    return STAGE.bind(OpenFusionParams(recipe.bon.scorer, recipe.bon.filter, recipe.fusion.min_span), upstream)


def sft_parts(i: Inputs, hard_filter: BonFilter) -> dict[str, pa.Table]:
    """The SFT dataset of the fused answers the hard filter keeps (``i``: problems, the fused candidates and
    their scores), as TRL ``messages`` and a plain table."""
    values = _values(i, "scores")
    t = i.sql("SELECT c.problem_id, p.question, c.candidate_id, c.text FROM candidates c "
              "JOIN problems p ON p.problem_id = c.problem_id WHERE c.text IS NOT NULL ORDER BY c.problem_id")
    t = t.filter(pa.array([excluded(values.get(c, {}), hard_filter) is None
                           for c in t.column("candidate_id").to_pylist()], pa.bool_()))
    return {"trl": sft_messages(t, {"problem_id": pa.string(), "candidate_id": pa.string()}), "plain": t}
