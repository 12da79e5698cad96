"""A verdicts stage run, judging stubbed: its progress bar's total (a streamed stage's bar has one where the
rows of the input it streams are known from that input's manifests: verification counts the candidates,
problem_stats the verdicts), and the files it writes (each shard's piece of the row index in the shard itself:
on an object store every file is requests)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import bonforge.runtime.progress
from bonforge.config import Recipe
from bonforge.engine import reuse, run_node
from bonforge.schema import CANDIDATES, PROBLEMS, VERDICTS, conform
from bonforge.stage import Ref
from bonforge.stages import problem_stats, verify
from bonforge.storage.store import StageStore

SRC = {"path": "x.jsonl"}
RECIPE = Recipe.model_validate({"name": "s", "problems": {"name": "s", "source": SRC}, "export": {"name": "s"},
                                "teachers": [{"name": "t", "engine": "pool", "source": SRC}]})


def _judged(candidates, problems, cfg, todo=None, progress=None, known=None):
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


def _node(store: StageStore, judged=_judged, candidates: Ref | None = None):
    ref = lambda name, key: Ref(name, key, store.manifest(name, key))  # noqa: E731
    node = verify.node(RECIPE, ref("problems", "p"), candidates or ref("candidates", "c"), {"math"})
    return dataclasses.replace(node, stage=dataclasses.replace(node.stage, compute=judged, executor="local"))


def test_a_streamed_stage_s_bar_counts_the_rows_of_the_input_it_streams(tmp_path, monkeypatch):
    totals, advanced = [], []

    @contextlib.contextmanager
    def progress(label, total, done=0):
        totals.append(total)
        yield advanced.append

    monkeypatch.setattr(bonforge.runtime.progress, "stage_progress", progress)
    store = _store(tmp_path)
    node = _node(store)
    verdicts = run_node(store, node)
    assert store.manifest("candidates", "c")["rows"] == 400 and verdicts["rows"] == 400
    assert totals == [400] and sum(advanced) == 400 and len(advanced) > 1  # shards of 256 candidates
    run_node(store, problem_stats.node(RECIPE, [Ref("verdicts", node.key, verdicts)]))
    assert totals == [400, 400]


def test_without_a_known_input_a_streamed_stage_s_bar_has_no_total(tmp_path, monkeypatch):
    totals = []

    @contextlib.contextmanager
    def progress(label, total, done=0):
        totals.append(total)
        yield lambda n: None

    monkeypatch.setattr(bonforge.runtime.progress, "stage_progress", progress)
    store = _store(tmp_path)
    run_node(store, _node(store, candidates=Ref("candidates", "c")))
    assert totals == [None]  # a ref without its manifest: rows unknown


def test_each_shard_is_one_file_with_its_piece_of_the_row_index(tmp_path, monkeypatch):
    store = _store(tmp_path)
    written = []
    write = type(store.loc).write_parquet  # every store of this folder (each shard's writer opens its own)
    monkeypatch.setattr(type(store.loc), "write_parquet", lambda loc, table, path, notes=None: (
        written.append(path.name), write(loc, table, path, notes)))
    man = run_node(store, _node(store))
    # two shards (256 and 144 candidates), the readers' file of both, the row index: no other file
    assert sorted(written) == ["data-00000.parquet", "part-00000.parquet", "part-00001.parquet", "rows.parquet"]
    index = pq.read_table(store.stage_dir("verdicts", man.key) / man.row_index)
    assert index.num_rows == 400 and set(index.column("row_key").to_pylist()) == set(
        store.read("candidates", "c", ["candidate_id"]).column("candidate_id").to_pylist())


def test_a_shard_without_its_piece_is_committed_and_its_rows_are_not_offered(tmp_path, caplog):
    """As a shard written by an older version, then resumed: its rows are computed again next time."""
    store = _store(tmp_path)
    calls = []

    def interrupted(candidates, problems, cfg, todo=None, progress=None, known=None):
        calls.append(candidates.num_rows)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return _judged(candidates, problems, cfg, todo)

    node = _node(store, interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_node(store, node)
    table = store.read_file(store.shard_path("verdicts", node.key, 0))
    assert reuse.PIECE not in table.schema.metadata  # the piece is the file's, not the table's
    store.write_shard("verdicts", node.key, 0, table)  # without it
    with caplog.at_level(logging.WARNING, "bonforge"):
        man = run_node(store, _node(store))
    assert man["rows"] == 400 and man["shards_resumed"] == 1
    assert "shard 0 has no readable piece of the row index" in caplog.text
    index = pq.read_table(store.stage_dir("verdicts", man.key) / man.row_index)
    assert index.num_rows == 144 and not set(index.column("row_key").to_pylist()) & set(
        table.column("candidate_id").to_pylist())
