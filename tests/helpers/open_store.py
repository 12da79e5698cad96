"""A small store of an open-ended run written by hand (two requests, a German and an English one; two teachers
and a fused answer each; scores, Best-of-N picks, the fused answer beside Best-of-N, pairwise games), for the
report's and the viewer's open-ended pages."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from bonforge import schema
from bonforge.storage.run_record import RunRecord
from bonforge.storage.store import StageStore

PROBLEMS = [("de1", "Wie spät ist es?", {"language": "de", "category": "chat"}),
            ("en1", "What time is it?", {"category": "chat"})]
TEXTS = {"a": "Es ist drei Uhr.", "b": "It is three.", "fusor": "Es ist genau drei Uhr."}


def _write(store: StageStore, stage: str, rows: list[dict], table_schema: pa.Schema, **manifest) -> str:
    store.write_shard(stage, stage, 0, pa.Table.from_pylist(rows, schema=table_schema))
    store.commit(stage, stage, 1, version="1", config=manifest.pop("config", {}), upstream={}, extra=manifest)
    return stage


def open_store(root: Path) -> StageStore:
    store = StageStore(root)
    problems = [{"problem_id": p, "domain": "open", "question": q, "metadata": json.dumps(m)} for p, q, m in PROBLEMS]
    cands, scores = [], []
    for pid, _, _ in PROBLEMS:
        for teacher, text in TEXTS.items():
            cid = f"{pid}/{teacher}/0"
            cands.append({"candidate_id": cid, "problem_id": pid, "teacher": teacher, "sample_index": 0, "text": text})
            lang = "en" if teacher == "b" else "de"
            expected = "de" if pid == "de1" else "en"
            scores.append({"candidate_id": cid, "problem_id": pid, "teacher": teacher, "scorer": "lang",
                           "kind": "language_id", "value": float(lang == expected), "label": lang, "status": "ok",
                           "detail": json.dumps({"expected": expected})})
            scores.append({"candidate_id": cid, "problem_id": pid, "teacher": teacher, "scorer": "rm",
                           "kind": "reward_model", "value": {"a": 1.0, "b": 2.0, "fusor": 1.5}[teacher],
                           "status": "ok", "n_tokens": 12, "truncated": False})
    bon = [{"problem_id": pid, "pool": "*", "scorer": "rm", "n_candidates": 2, "n_eligible": n,
            "candidate_id": cid, "value": v, "tie": False, "filtered": f}
           for pid, n, cid, v, f in (("de1", 1, "de1/a/0", 1.0, [("language", 1)]), ("en1", 1, "en1/b/0", 2.0,
                                                                                     [("language", 1)]))]
    fusion = [{"problem_id": pid, "fused_candidate_id": f"{pid}/fusor/0", "fused_kept": pid == "de1", "pool_size": 1,
               "scorer": "rm", "bon_candidate_id": bon_id, "fused_values": [("rm", 1.5)], "bon_values": [("rm", v)],
               "pool_max": [("rm", v)], "pool_mean": [("rm", v)], "total_chars": 22, "teacher_chars": [("a", 16)]}
              for pid, bon_id, v in (("de1", "de1/a/0", 1.0), ("en1", "en1/b/0", 2.0))]
    # fused vs b on both requests: de1 the fused answer wins both orders; en1 the orders disagree
    games = [{"problem_id": pid, "contender": "fused", "baseline": "teacher:b", "game": g, "contender_id":
              f"{pid}/fusor/0", "baseline_id": f"{pid}/b/0", "label": label, "status": "ok", "n_labels": 1,
              "contender_score": s, "response": f"Verdict [[{label}]]"}
             for pid, g, label, s in (("de1", 0, "B>A", 1.0), ("de1", 1, "A>B", 1.0), ("en1", 0, "A>B", 0.0),
                                      ("en1", 1, "A>B", 1.0))]
    keys = {"problems": [_write(store, "problems", problems, schema.PROBLEMS)],
            "candidates": [_write(store, "candidates", cands, schema.CANDIDATES)],
            "scores": [_write(store, "scores", scores, schema.SCORES)],
            "bon": [_write(store, "bon", bon, schema.BON)],
            "fusion_open": [_write(store, "fusion_open", fusion, schema.FUSION_OPEN, comparison={
                "selection_scorer": "rm", "scorers": {"rm": {"n": 2, "fused_mean": 1.5, "bon_mean": 1.5,
                                                             "pool_mean": 1.5, "fused_at_least_bon": 0.5,
                                                             "selection": True}}})],
            "pairwise": [_write(store, "pairwise", games, schema.PAIRWISE, config={"bootstrap": [100, 0, 0.9]},
                                evaluation={"fused vs teacher:b": {"warning": "the judge (j) is the fusor's model"}})]}
    store.record_run(RunRecord.from_json({"run_id": "r", "recipe_name": "open", "status": "succeeded",
                                          "stages": keys, "cached": {}}))
    return store
