"""The scores stage's progress: one shard of candidates moves as its scorer's batches finish (a scorer that
takes minutes per shard no longer shows 0 rows until the shard is written), and a real scorer (chrF) through
the stage moves the same way and scores the same."""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bonforge import scoring
from bonforge.engine import run_node
from bonforge.schema import CANDIDATES, PROBLEMS
from bonforge.scoring import Result
from bonforge.scoring.config import ReferenceScorer
from bonforge.stage import Ref
from bonforge.stages import scores
from bonforge.storage.store import StageStore

N = 40  # candidates: one shard (the stage's shards hold 256)
BATCH = 4


def counts(caplog) -> list[int]:
    """The rows done that the stage's progress lines said, in order."""
    return [int(r.getMessage().split(": ")[1].split("/")[0]) for r in caplog.records
            if r.name == "bonforge" and r.getMessage().startswith("scores[t]: ") and " rows" in r.getMessage()]


def scored(store: StageStore, cfg) -> pa.Table:
    store.write_shard("problems", "pk", 0, pa.Table.from_pylist(
        [{"problem_id": f"p{i:02d}", "source": "s", "domain": "open", "question": f"Say {i}.", "answer": f"{i} {i}"}
         for i in range(N)], schema=PROBLEMS))
    store.write_shard("candidates", "ck", 0, pa.Table.from_pylist(
        [{"candidate_id": f"p{i:02d}/t/0", "problem_id": f"p{i:02d}", "teacher": "t", "sample_index": 0,
          "text": f"{i} {i + i % 3}"} for i in range(N)], schema=CANDIDATES))
    refs = {name: Ref(name, key, store.commit(name, key, 1, version="1", config={}, upstream={}))
            for name, key in (("problems", "pk"), ("candidates", "ck"))}
    node = scores.STAGE.bind(scores.ScoresParams((cfg,)), refs, label="scores[t]")
    run_node(store, node)
    return pa.concat_tables(pq.read_table(p) for p in store.paths("scores", node.key))


class SlowBatches:
    """A scorer that scores ``BATCH`` items at a time and notes, as each batch begins, what the stage's
    progress has said so far (as a reward model on a loaded machine would take minutes per shard)."""

    def __init__(self, caplog):
        self.caplog, self.seen = caplog, []

    def score(self, items, progress=None):
        out = []
        for start in range(0, len(items), BATCH):
            self.seen.append(counts(self.caplog)[-1:] or [0])
            out += [Result(float(len(i.text))) for i in items[start:start + BATCH]]
            if progress is not None:
                progress(len(out))
        return out

    def close(self):
        pass


@pytest.fixture
def said(caplog, monkeypatch):
    monkeypatch.delenv("BONFORGE_QUIET", raising=False)
    with caplog.at_level(logging.INFO, "bonforge"):
        yield caplog


def test_progress_moves_between_a_scorers_batches_within_one_shard(tmp_path, said, monkeypatch):
    slow = SlowBatches(said)
    monkeypatch.setattr(scoring, "open_scorer", lambda cfg: slow)
    out = scored(StageStore(tmp_path), ReferenceScorer(kind="reference", name="m", metric="chrf"))
    assert out.num_rows == N
    # each batch after the first began with the rows of the batches before it already shown
    assert [s[0] for s in slow.seen] == list(range(0, N, BATCH))
    assert counts(said) == list(range(BATCH, N + 1, BATCH))


def test_a_real_scorer_moves_the_stage_by_its_pieces_and_scores_the_same(tmp_path, said):
    cfg = ReferenceScorer(kind="reference", name="m", metric="chrf")
    out = scored(StageStore(tmp_path), cfg)
    moved = counts(said)
    assert moved[-1] == N and [c for c in moved if 0 < c < N] == [32], moved  # sacrebleu: 32 answers a piece
    whole = scoring.open_scorer(cfg).score([scoring.Item(f"Say {i}.", f"{i} {i + i % 3}", f"{i} {i}")
                                            for i in range(N)])
    assert out.sort_by("candidate_id").column("value").to_pylist() == [r.value for r in whole]
