"""A streamed stage's progress bar has a total where its input's row count is known from the input's
manifests: the verdicts stage counts the candidates, problem_stats the verdicts."""

from __future__ import annotations

import contextlib
import dataclasses

import pyarrow as pa

import bonforge.progress
from bonforge.config import Recipe
from bonforge.engine import run_node
from bonforge.schema import CANDIDATES, PROBLEMS, VERDICTS, conform
from bonforge.stage import Ref
from bonforge.stages import score, verify
from bonforge.storage.store import StageStore

SRC = {"path": "x.jsonl"}
RECIPE = Recipe.model_validate({"name": "s", "problems": {"name": "s", "source": SRC}, "export": {"name": "s"},
                                "teachers": [{"name": "t", "engine": "pool", "source": SRC}]})


def _judged(candidates, problems, cfg, todo=None):
    n = candidates.num_rows
    return conform(pa.table({"candidate_id": candidates.column("candidate_id"),
                             "problem_id": candidates.column("problem_id"), "teacher": candidates.column("teacher"),
                             "correct": [False] * n, "reward": [0.0] * n, "status": ["wrong_answer"] * n}), VERDICTS)


def _store(root) -> StageStore:
    """50 problems; their 8 candidates each in two committed files of 25 problems."""
    store = StageStore(root)
    pids = [f"p{i:03d}" for i in range(50)]
    store.write_shard("problems", "p", 0, conform(pa.table({
        "problem_id": pids, "domain": ["math"] * 50, "question": ["q"] * 50, "answer": ["7"] * 50}), PROBLEMS))
    store.commit("problems", "p", 1, version="1", config={}, upstream={})
    for f in range(2):
        cid = [f"{p}/t/{i}" for p in pids[25 * f:25 * (f + 1)] for i in range(8)]
        store.write_shard("candidates", "c", f, conform(pa.table({
            "candidate_id": cid, "problem_id": [c.split("/")[0] for c in cid], "teacher": ["t"] * len(cid),
            "sample_index": [int(c[-1]) for c in cid], "text": [f"{c}: 3" for c in cid]}), CANDIDATES))
    store.commit("candidates", "c", 2, version="1", config={}, upstream={})
    return store


def test_a_streamed_stage_s_bar_counts_the_rows_of_the_input_it_streams(tmp_path, monkeypatch):
    totals, advanced = [], []

    @contextlib.contextmanager
    def progress(label, total):
        totals.append(total)
        yield advanced.append

    monkeypatch.setattr(bonforge.progress, "stage_progress", progress)
    store = _store(tmp_path)
    ref = lambda name, key: Ref(name, key, store.manifest(name, key))  # noqa: E731
    node = verify.node(RECIPE, ref("problems", "p"), ref("candidates", "c"), {"math"})
    node = dataclasses.replace(node, stage=dataclasses.replace(node.stage, compute=_judged, executor="local"))
    verdicts = run_node(store, node)
    assert store.manifest("candidates", "c")["rows"] == 400 and verdicts["rows"] == 400
    assert totals == [400] and sum(advanced) == 400 and len(advanced) > 1  # shards of 256 candidates
    run_node(store, score.node(RECIPE, [ref("verdicts", node.key)]))
    assert totals == [400, 400]


def test_without_a_known_input_a_streamed_stage_s_bar_has_no_total(tmp_path, monkeypatch):
    totals = []

    @contextlib.contextmanager
    def progress(label, total):
        totals.append(total)
        yield lambda n: None

    monkeypatch.setattr(bonforge.progress, "stage_progress", progress)
    store = _store(tmp_path)
    node = verify.node(RECIPE, Ref("problems", "p", store.manifest("problems", "p")), Ref("candidates", "c"), {"math"})
    node = dataclasses.replace(node, stage=dataclasses.replace(node.stage, compute=_judged, executor="local"))
    run_node(store, node)
    assert totals == [None]  # a ref without its manifest: rows unknown
