"""Stage ``bon``: Best-of-N for open-ended problems. Per problem, over all teachers together (pool ``*``) and
over each teacher's own candidates, the candidate with the highest value of the recipe's ``bon.scorer``
among the eligible ones: scored by it (status ok) and kept by the filter (``bon.filter``: the answer in the
expected language by a language_id scorer; each named scorer's value at least its minimum). Ties go to the
lowest ``candidate_id`` and are flagged; a pool without an eligible candidate gets a row without a pick.
The exports: ``sft_parts``, the picks of pool ``*`` as TRL ``messages``; ``preference_parts``, per problem the
best against the worst eligible answer (when their values differ), for TRL's RewardTrainer and DPOTrainer."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import pyarrow as pa

from bonforge.config import BonConfig, Recipe
from bonforge.schema import BON
from bonforge.selection.best_of_n import excluded, pick
from bonforge.stage import Inputs, Node, Params, Ref, Stage, whole_key
from bonforge.selection.sft import sft_messages
from bonforge.tables import trajectories

VERSION = "1"


def best_of_n(scores: pa.Table, cfg: BonConfig) -> pa.Table:
    """BON rows of ``scores`` (problem_id, candidate_id, teacher, scorer, value, status; whole problems)."""
    by_problem: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in scores.to_pylist():
        cand = by_problem[r["problem_id"]].setdefault(r["candidate_id"], {"teacher": r["teacher"], "ok": {}})
        if r["status"] == "ok" and r["value"] is not None:
            cand["ok"][r["scorer"]] = r["value"]
    rows = []
    for pid in sorted(by_problem):
        cands = by_problem[pid]
        pools = {"*": sorted(cands)}
        for cid in sorted(cands):
            pools.setdefault(cands[cid]["teacher"], []).append(cid)
        for pool in ["*"] + sorted(p for p in pools if p != "*"):
            filtered: dict[str, int] = defaultdict(int)
            eligible: dict[str, float] = {}
            for cid in pools[pool]:
                ok = cands[cid]["ok"]
                reason = "unscored" if cfg.scorer not in ok else excluded(ok, cfg.filter)
                if reason:
                    filtered[reason] += 1
                else:
                    eligible[cid] = ok[cfg.scorer]
            cid, value, runner_up, tie = pick(eligible) if eligible else (None, None, None, False)
            worst = min(eligible.items(), key=lambda cv: (cv[1], cv[0])) if eligible else (None, None)
            rows.append({"problem_id": pid, "pool": pool, "scorer": cfg.scorer, "n_candidates": len(pools[pool]),
                         "n_eligible": len(eligible), "candidate_id": cid, "value": value, "runner_up": runner_up,
                         "worst_candidate_id": worst[0], "worst_value": worst[1], "tie": tie,
                         "filtered": sorted(filtered.items())})
    return pa.Table.from_pylist(rows, schema=BON)


def _compute(scores: pa.Table, cfg: BonConfig) -> pa.Table:
    return best_of_n(scores, cfg)


@dataclass(frozen=True)
class BonParams(Params):
    cfg: BonConfig = whole_key()


def _scores(i: Inputs) -> pa.Table:
    return i.sql("SELECT problem_id, candidate_id, teacher, scorer, value, status FROM scores "
                 "ORDER BY problem_id, candidate_id, scorer")


STAGE = Stage("bon", VERSION, params=BonParams, schema=BON, compute=_compute, table=_scores, shard_rows=200_000)


def node(recipe: Recipe, scores: list[Ref]) -> Node:
    return STAGE.bind(BonParams(recipe.bon), {"scores": scores})


def sft_parts(i: Inputs) -> dict[str, pa.Table]:
    """The Best-of-N SFT dataset: each problem's pick over all teachers (``i``: problems, candidates, bon),
    as TRL ``messages`` and a plain table with the scorer and its value."""
    acted = trajectories.any_in(i)
    t = i.sql(f"SELECT b.problem_id, p.question, b.candidate_id, c.teacher, c.text, b.scorer, b.value"
              f"{', c.messages' if acted else ''} FROM bon b JOIN candidates c USING (candidate_id) "
              "JOIN problems p ON p.problem_id = b.problem_id "
              "WHERE b.pool = '*' AND b.candidate_id IS NOT NULL ORDER BY b.problem_id")
    messages = sft_messages(t, {"problem_id": pa.string(), "candidate_id": pa.string(), "scorer": pa.string(),
                                "value": pa.float64()})
    return {"trl": messages, "plain": t.drop_columns(["messages"]) if acted else t}


_PAIR = ("problem_id", "chosen_id", "rejected_id", "scorer", "score_chosen", "score_rejected")


def preference_parts(i: Inputs) -> dict[str, pa.Table]:
    """Preference pairs (``i``: problems, candidates, bon): per problem, the Best-of-N pick over all teachers
    (chosen) against the eligible answer with the lowest value (rejected), where the two values differ; TRL's
    conversational preference shape (``prompt`` = the user turn, ``chosen`` / ``rejected`` = one assistant
    turn each) with the scorer's values beside them."""
    t = i.sql("SELECT b.problem_id, p.question, b.candidate_id AS chosen_id, c.text AS chosen_text, "
              "b.worst_candidate_id AS rejected_id, w.text AS rejected_text, b.scorer, b.value AS score_chosen, "
              "b.worst_value AS score_rejected FROM bon b JOIN candidates c USING (candidate_id) "
              "JOIN candidates w ON w.candidate_id = b.worst_candidate_id "
              "JOIN problems p ON p.problem_id = b.problem_id "
              "WHERE b.pool = '*' AND b.value > b.worst_value ORDER BY b.problem_id")
    msg = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    rows = [{"prompt": [{"role": "user", "content": r["question"]}],
             "chosen": [{"role": "assistant", "content": r["chosen_text"]}],
             "rejected": [{"role": "assistant", "content": r["rejected_text"]}],
             **{k: r[k] for k in _PAIR}} for r in t.to_pylist()]
    schema = pa.schema([("prompt", msg), ("chosen", msg), ("rejected", msg), ("problem_id", pa.string()),
                        ("chosen_id", pa.string()), ("rejected_id", pa.string()), ("scorer", pa.string()),
                        ("score_chosen", pa.float64()), ("score_rejected", pa.float64())])
    return {"trl": pa.Table.from_pylist(rows, schema=schema)}
