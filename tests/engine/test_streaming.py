"""The pieces of a streaming build (``bonforge.engine.streaming``): what a node being computed tells its
readers, its shards read as they are written (``streams.Growing``), a streamed stage's shards cut as the
upstream writes them, and resources held alone."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from bonforge.engine.run import StreamingRun
from bonforge.engine.shards import busy
from bonforge.engine.streaming import Ahead, Output
from bonforge.engine.streams import aligned, cut, opened
from bonforge.errors import StoreError
from bonforge.stage import Pending, Ref
from bonforge.storage.store import StageStore


def later(seconds: float, fn, *args) -> threading.Thread:
    def go():
        time.sleep(seconds)
        fn(*args)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def test_a_reader_waits_for_each_shard_then_learns_there_are_no_more():
    out = Output("candidates[a]")
    later(0.05, out.wrote, 0)
    assert out.shard(0) is True
    later(0.05, out.last, 1)
    assert out.shard(1) is False  # every shard written, and there is no shard 1
    later(0.05, out.committed, Ref("candidates", "k"))
    assert out.wait() == Ref("candidates", "k") and out.ref == Ref("candidates", "k")


def test_a_failed_node_fails_its_readers_with_its_own_error():
    out = Output("candidates[a]")
    out.wrote(0)
    later(0.05, out.failed, StoreError("disk full"))
    assert out.shard(0) is True  # written before the failure: readable
    with pytest.raises(StoreError, match="disk full"):
        out.shard(1)
    with pytest.raises(StoreError, match="disk full"):
        out.wait()


def candidates(pids: list[str], n: int = 2) -> pa.Table:
    rows = [{"problem_id": p, "candidate_id": f"{p}/t/{i}"} for p in pids for i in reversed(range(n))]
    return pa.Table.from_pylist(rows)


FOUR = pa.table({"problem_id": [f"p{i}" for i in range(4)], "x": list(range(4))})  # one row a shard below


def read_as_written(name: str):
    """A stage's stream: its input ``name`` (problem_id, x) as the upstream writes it."""

    def rows(i):
        with i.aligned({name: ["problem_id", "x"]}) as chunks:
            yield from (c[name] for c in chunks)

    return rows


def writer(store: StageStore, out: Output, shards: list[pa.Table], pause: float, commit: bool = True):
    def go():
        for i, t in enumerate(shards):
            time.sleep(pause)
            store.write_shard("candidates", "k", i, t)
            out.wrote(i)
        out.last(len(shards))
        if commit:
            out.committed(Ref("candidates", "k"))

    return threading.Thread(target=go, daemon=True)


def test_growing_reads_each_shard_as_it_is_written_and_cuts_as_the_committed_read_does(tmp_path):
    store = StageStore(tmp_path)
    shards = [candidates(["p0", "p1", "p2"]), candidates(["p3"]), candidates(["p4", "p5"])]
    out = Output("candidates[t]")
    ref = Pending("candidates", "k", output=out)
    seen: list[float] = []
    t = writer(store, out, shards, 0.2)
    t0 = time.monotonic()
    t.start()
    with opened(store, {"candidates": [ref]}, {"candidates": ["problem_id", "candidate_id"]}) as readers:
        chunks = []
        for chunk in aligned(readers):
            seen.append(time.monotonic() - t0)
            chunks.append(chunk["candidates"])
    t.join()
    assert seen[0] < 0.5  # the first shard's rows came before the last shard was written (0.6 s)
    assert [c.num_rows for c in chunks[:3]] == [6, 2, 4]  # a chunk per shard as written
    streamed = [s.to_pylist() for s in cut(chunks, 4, None)]
    whole = pa.concat_tables(shards)
    assert streamed == [s.to_pylist() for s in cut([whole], 4, None)]  # the same shards as read at once
    assert streamed[0][:2] == [{"problem_id": "p0", "candidate_id": "p0/t/0"},
                               {"problem_id": "p0", "candidate_id": "p0/t/1"}]


def test_a_growing_input_gives_each_shard_s_chunk_before_the_next_shard_is_written(tmp_path):
    """A chunk ends where its shard does (a shard is whole problems): the reader does not wait for the next shard
    to learn that it holds none of the chunk's problems. Control: the rows are all read, once, in order."""
    store = StageStore(tmp_path)
    out = Output("candidates[t]")
    ref = Pending("candidates", "k", output=out)
    taken, second = threading.Event(), threading.Event()

    def go():
        store.write_shard("candidates", "k", 0, candidates(["p0", "p1"]))
        out.wrote(0)
        taken.wait(10)  # the reader has the first chunk (or gave up waiting)
        second.set()
        store.write_shard("candidates", "k", 1, candidates(["p2"]))
        out.wrote(1)
        out.last(2)

    threading.Thread(target=go, daemon=True).start()
    with opened(store, {"candidates": [ref]}, {"candidates": ["problem_id", "candidate_id"]}) as readers:
        chunks = aligned(readers)
        first = next(chunks)["candidates"]
        early = not second.is_set()
        taken.set()
        rest = [c["candidates"] for c in chunks]
    assert early and first.column("problem_id").to_pylist() == ["p0", "p0", "p1", "p1"]
    assert [p for c in rest for p in c.column("problem_id").to_pylist()] == ["p2", "p2"]


def test_shards_out_of_problem_order_are_refused_not_misread(tmp_path):
    store = StageStore(tmp_path)
    out = Output("candidates[t]")
    t = writer(store, out, [candidates(["p5"]), candidates(["p1"])], 0.0, commit=False)  # read as written, always
    t.start()
    with pytest.raises(StoreError, match="shard 1 starts at problem 'p1'"):
        with opened(store, {"candidates": [Pending("candidates", "k", output=out)]},
                    {"candidates": ["problem_id"]}) as readers:
            list(aligned(readers))
    t.join()


def test_ahead_says_whether_the_next_item_is_there_and_hands_on_errors():
    gate = threading.Event()

    def items():
        yield 1
        gate.wait()
        yield 2
        raise StoreError("upstream failed")

    ahead = Ahead(items())
    it = iter(ahead)
    assert next(it) == 1
    time.sleep(0.05)
    assert not ahead.ready()  # the next one waits upstream
    gate.set()
    assert next(it) == 2
    with pytest.raises(StoreError, match="upstream failed"):
        next(it)


def test_busy_is_the_union_of_the_shards_spans():
    assert busy([(5.0, 6.0), (1.0, 2.0), (1.5, 3.0), (6.0, 7.0)]) == [[1.0, 3.0], [5.0, 7.0]]
    assert busy([]) == []


def test_nodes_naming_one_resource_compute_one_at_a_time(tmp_path):
    run = StreamingRun.__new__(StreamingRun)
    StreamingRun.__init__(run, StageStore(tmp_path), None)
    inside, most = [0], [0]

    def hold():
        with run._held("gpu model"):
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            time.sleep(0.05)
            inside[0] -= 1

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1
    with run._held(None), run._held(None):  # no resource: nothing held
        pass


def test_a_node_holding_a_resource_waits_for_its_streamed_input_first_and_never_deadlocks(tmp_path):
    """The consumer takes the GPU while its producer (same GPU) still waits upstream: were it to stream, it would
    hold the GPU waiting for shards that need the GPU."""
    from types import SimpleNamespace

    from bonforge.stage import Stage

    def slow(shard):
        time.sleep(0.3)
        return shard

    first = Stage("first", "1", compute=slow, table=lambda i: FOUR, shard_rows=1)
    mid = Stage("mid", "1", compute=lambda s: s, table=lambda i: i.read("first"), shard_rows=1,
                resource=lambda p: "gpu model")
    last = Stage("last", "1", compute=lambda s: s, stream=read_as_written("mid"), stream_of="mid", shard_rows=1,
                 resource=lambda p: "gpu model")
    run = StreamingRun(StageStore(tmp_path), SimpleNamespace(reuse=True))
    done = threading.Event()

    def build():
        a = run(first.bind({}, {}))
        b = run(mid.bind({}, {"first": a}))
        c = run(last.bind({}, {"mid": b}))
        run.wait(c)
        done.set()

    threading.Thread(target=build, daemon=True).start()
    assert done.wait(30), "deadlock: the consumer held the GPU its producer waited for"
    assert StageStore(tmp_path).read("last", run.record["last"][0]).column("x").to_pylist() == [0, 1, 2, 3]


def test_a_failing_stage_fails_the_stages_reading_it_and_the_build_with_its_own_name(tmp_path):
    from types import SimpleNamespace

    from bonforge.engine.run import StageFailed
    from bonforge.errors import DataError
    from bonforge.stage import Stage

    def breaks(shard):
        if shard.column("problem_id")[0].as_py() == "p2":
            raise DataError("bad record", "problems.jsonl")
        return shard

    first = Stage("first", "1", compute=breaks, table=lambda i: FOUR, shard_rows=1)
    then = Stage("then", "1", compute=lambda s: s, stream=read_as_written("first"), stream_of="first", shard_rows=1)
    run = StreamingRun(StageStore(tmp_path), SimpleNamespace(reuse=True))
    a = run(first.bind({}, {}, label="first[t]"))
    b = run(then.bind({}, {"first": a}))
    with pytest.raises(StageFailed, match=r"stage first\[t\]: .*bad record"):
        run.wait(b)
    run.join(failed=True)  # returns: every thread has ended
    assert not StageStore(tmp_path).exists("first", a.key) and not StageStore(tmp_path).exists("then", b.key)
