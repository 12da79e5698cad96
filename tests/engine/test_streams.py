"""Streamed stage inputs (bonforge.engine.streams): ordered reading, chunks of whole problems, the shard cut."""

import numpy as np
import pyarrow as pa
import pytest

from bonforge.engine import streams
from bonforge.engine.shards import plan_shards
from bonforge.engine.streams import aligned, cut, opened
from bonforge.stage import Ref


def _table(pids: list[str], text: str = "x") -> pa.Table:
    return pa.table({"problem_id": pids, "candidate_id": [f"{p}/{i}" for i, p in enumerate(pids)],
                     "text": [text * (1 + i % 3) for i in range(len(pids))]})


def _put(store, name: str, key: str, table: pa.Table, shards: int = 1) -> Ref:
    parts = np.array_split(np.arange(table.num_rows), shards)
    for i, rows in enumerate(parts):
        store.write_shard(name, key, i, table.take(pa.array(rows)))
    return Ref(name, key, store.commit(name, key, shards, version="1", config={}, upstream={}))


@pytest.mark.parametrize("shard_rows", [1, 7, 50, 1000])
def test_cut_makes_the_shards_plan_shards_makes(shard_rows):
    rng = np.random.default_rng(1)
    pids = sorted(f"p{i:04d}" for i in rng.integers(0, 300, 2000))
    table = _table(pids)
    bounds = [0, *sorted(rng.choice(np.flatnonzero(np.r_[True, np.array(pids[1:]) != np.array(pids[:-1])]), 20)),
              len(pids)]
    chunks = [table.slice(a, b - a) for a, b in zip(bounds, bounds[1:]) if b > a]  # chunks of whole problems
    got = [s.to_pylist() for s in cut(chunks, shard_rows, None)]
    want = [s.to_pylist() for s in plan_shards(table, shard_rows)]
    assert got == want


@pytest.mark.parametrize("limits", [(4, None), (None, 20)])
def test_a_shard_full_at_a_chunks_end_closes_before_the_next_chunk_is_asked_for(limits):
    """A chunk ends a problem: a streaming build verifies a full shard without waiting for the next sampling
    shard. Control: the shards are those of the whole table cut at once."""
    chunks = [_table(["p0", "p0", "p1", "p1"]), _table(["p2", "p3"]), _table(["p3", "p4", "p4", "p5"])[1:]]
    asked = []

    def coming():
        for i, chunk in enumerate(chunks):
            asked.append(i)
            yield chunk

    shards = cut(coming(), *limits)
    assert next(shards).column("problem_id").to_pylist() == ["p0", "p0", "p1", "p1"] and asked == [0]
    rest = [s.column("problem_id").to_pylist() for s in shards]
    whole = [s.column("problem_id").to_pylist() for s in cut([pa.concat_tables(chunks)], *limits)]
    assert [["p0", "p0", "p1", "p1"], *rest] == whole and asked == [0, 1, 2]


def test_a_shard_closes_once_its_strings_hold_shard_bytes():
    table = _table([f"p{i // 2:03d}" for i in range(200)], text="y" * 100)
    shards = list(cut([table], None, 1000))
    sizes = [sum(len(t) + len(p) + len(c) for p, c, t in zip(*(s.column(n).to_pylist() for n in s.column_names)))
             for s in shards]
    assert len(shards) > 5 and sum(s.num_rows for s in shards) == 200
    assert all(s >= 1000 for s in sizes[:-1]) and all(s < 1000 + 2 * 320 for s in sizes)  # at most one problem over
    firsts, lasts = ([s.column("problem_id")[i].as_py() for s in shards] for i in (0, -1))
    assert all(a < b for a, b in zip(lasts, firsts[1:]))


def test_strings_in_lists_count_towards_shard_bytes():
    """A row of a list of texts (the fusion analysis' pools: each pool's member texts) weighs its texts."""
    pools = pa.table({"problem_id": [f"p{i:03d}" for i in range(100)], "texts": [["y" * 100, None, "z" * 50]] * 100})
    shards = list(cut([pools], None, 1000))
    assert [s.num_rows for s in shards] == [7] * 14 + [2]  # 4 + 150 bytes a row: a shard closes at 1,000


def test_an_empty_input_is_one_empty_shard():
    empty = _table([]).slice(0, 0)
    assert [s.num_rows for s in cut([empty, empty], 10, None)] == [0]


def test_inputs_are_read_side_by_side_in_chunks_of_whole_problems(store, monkeypatch):
    monkeypatch.setattr(streams, "BATCH_BYTES", 64)  # a few rows per batch
    monkeypatch.setattr(streams, "_MIN_BATCH_ROWS", 4)
    rng = np.random.default_rng(2)
    a = _table(sorted(f"p{i:03d}" for i in rng.integers(0, 60, 400)))
    b = _table(sorted(f"p{i:03d}" for i in rng.integers(0, 80, 300)))
    unsorted = _table([f"p{i:03d}" for i in rng.integers(0, 70, 250)])  # a source in file order
    refs = {"a": [_put(store, "a", "k1", a, shards=3)],
            "b": [_put(store, "b", "k2", b), _put(store, "u", "k3", unsorted)]}
    with opened(store, refs, {"a": ["problem_id", "text"], "b": ["problem_id", "candidate_id"]}) as readers:
        chunks = list(aligned(readers))
    assert len(chunks) > 5
    last = ""
    for c in chunks:
        pids = set(c["a"].column("problem_id").to_pylist()) | set(c["b"].column("problem_id").to_pylist())
        assert not pids or min(pids) > last  # each chunk after the last: a problem's rows are all in one chunk
        last = max(pids, default=last)
    for name, tables in (("a", [a]), ("b", [b, unsorted])):
        got = pa.concat_tables([c[name] for c in chunks]).column("problem_id").to_pylist()
        assert sorted(got) == sorted(p for t in tables for p in t.column("problem_id").to_pylist())


def test_a_pool_is_the_join_of_its_inputs_kept_problems_only(store):
    from bonforge.engine.shards import StoreInputs
    from bonforge.selection import judged_pool

    pids = [f"p{i:02d}" for i in range(30)]
    cands = pa.table({"problem_id": [p for p in pids for _ in range(3)],
                      "candidate_id": [f"{p}/{t}" for p in pids for t in ("a", "b", "c")],
                      "teacher": ["a", "b", "c"] * 30, "text": [f"text {i}" for i in range(90)]})
    verdicts = cands.select(["problem_id", "candidate_id"]).append_column("correct", pa.array([True, False] * 45))
    verdicts = verdicts.filter(pa.array([i % 7 != 0 for i in range(90)]))  # some candidates have no verdict
    problems = pa.table({"problem_id": pids[::-1], "question": [f"q {p}" for p in pids[::-1]]})  # not in order
    stats = pa.table({"problem_id": pids, "teacher": ["*"] * 30, "keep": [i % 3 != 0 for i in range(30)]})
    tables = {"candidates": cands, "verdicts": verdicts, "problems": problems, "problem_stats": stats}
    refs = {name: [_put(store, name, name[0], t)] for name, t in tables.items()}
    got = pa.concat_tables(judged_pool.chunks(StoreInputs(store, refs), {
        "candidate_id": "candidates", "question": "problems", "response": "candidates.text", "correct": "verdicts",
    }, teachers=["a", "c"])).sort_by("candidate_id").to_pylist()
    kept = {p for p, k in zip(pids, stats.column("keep").to_pylist()) if k}
    have = dict(zip(verdicts.column("candidate_id").to_pylist(), verdicts.column("correct").to_pylist()))
    want = [{"candidate_id": c, "question": f"q {p}", "response": x, "correct": have[c]}
            for p, c, t, x in zip(*(cands.column(n).to_pylist() for n in cands.column_names))
            if p in kept and t in ("a", "c") and c in have]
    assert got == sorted(want, key=lambda r: r["candidate_id"]) and len(want) > 20


def test_rebatched_gives_parts_of_exactly_n_rows():
    from bonforge.selection import judged_pool

    parts = [pa.table({"x": pa.array(range(n), pa.int64())}) for n in (3, 0, 11, 5, 1)]
    assert [t.num_rows for t in judged_pool.rebatched(iter(parts), 4)] == [4, 4, 4, 4, 4]
    assert pa.concat_tables(judged_pool.rebatched(iter(parts), 7)).column("x").to_pylist() == \
        pa.concat_tables(parts).column("x").to_pylist()


def test_an_input_in_file_order_is_sorted_without_a_word(store, caplog):
    """A source in file order is the common case (problems as their file lists them): it is sorted on disk
    and read in order, and the build's output says nothing of it (the line is for --debug readers)."""
    unsorted = _put(store, "u", "k1", _table(["p3", "p1", "p2", "p1"]))
    with caplog.at_level("DEBUG", logger="bonforge"), opened(store, {"u": [unsorted]}, {"u": ["problem_id"]}) as r:
        got = pa.concat_tables([c["u"] for c in aligned(r)]).column("problem_id").to_pylist()
    assert got == ["p1", "p1", "p2", "p3"]
    assert [r.levelname for r in caplog.records if "problem_id order" in r.getMessage()] == ["DEBUG"]
