"""Rows done while a shard runs: a one-shard stage whose compute reports its work shows intermediate counts in
its log lines, in process and from a Ray task; a shard's count is replaced by its rows once written, and a
retried task never counts its rows twice."""

from __future__ import annotations

import logging
import os
import time

import pyarrow as pa
import pytest

import bonforge.engine.shard_progress as shard_progress
from bonforge.engine import run_node
from bonforge.engine.shard_progress import ShardCounts
from bonforge.stage import Stage

TABLE = pa.table({"problem_id": [f"p{i:02d}" for i in range(12)], "x": list(range(12))})


def said(caplog, label: str) -> list[str]:
    return [r.getMessage().split(",")[0] for r in caplog.records
            if r.name == "bonforge" and r.getMessage().startswith(f"{label}: ") and "rows" in r.getMessage()]


def reporting(pause: float):
    """A compute that reports a quarter of its work at a time (a closure: Ray pickles it by value)."""

    def compute(shard: pa.Table, progress=None) -> pa.Table:
        for k in range(1, 4):
            time.sleep(pause)
            progress(k, 4)
        time.sleep(pause)
        return shard

    return compute


def node(name: str, compute, executor: str = "local"):
    return Stage(name, "1", compute=compute, table=lambda i: TABLE, shard_rows=256, executor=executor,
                 reports=True).bind({}, {})


def test_counts_grow_once_and_the_written_shard_replaces_them():
    added: list[int] = []
    counts = ShardCounts(added.append)
    report = counts.start(0, 12)
    report(1, 4)
    report(3, 4)
    report(1, 4)  # a retried attempt starting again: nothing until it passes 3/4
    report(2, 4)
    assert sum(added) == 9
    report(4, 4)
    counts.finish(0, 12)
    report(4, 4)  # late, after the write: dropped
    counts.finish(0, 12)  # written twice (never): counted once
    counts.report(7, 1, 2)  # a shard that never started: nothing
    assert added == [3, 6, 3] and sum(added) == 12
    assert counts.shown == {} and counts.rows == {}


def test_a_report_beyond_the_work_counts_no_more_than_the_shard():
    added: list[int] = []
    counts = ShardCounts(added.append)
    counts.start(0, 10)(30, 20)
    counts.finish(0, 10)
    assert added == [10]


def test_a_one_shard_stage_moves_while_its_shard_runs(store, caplog, monkeypatch):
    monkeypatch.delenv("BONFORGE_QUIET", raising=False)
    with caplog.at_level(logging.INFO, "bonforge"):
        run_node(store, node("local", reporting(0.0)))
    assert said(caplog, "local") == ["local: 3/12 rows (25%)", "local: 6/12 rows (50%)", "local: 9/12 rows (75%)",
                                     "local: 12/12 rows (100%)"]


ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_up():
    assert not ray.is_initialized()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_a_one_shard_stage_on_ray_moves_while_its_task_runs(store, caplog, monkeypatch, ray_up):
    monkeypatch.delenv("BONFORGE_QUIET", raising=False)
    monkeypatch.setattr(shard_progress, "REPORT_EVERY_S", 0.0)
    monkeypatch.setattr(shard_progress, "POLL_S", 0.05)
    with caplog.at_level(logging.INFO, "bonforge"):
        man = run_node(store, node("remote", reporting(0.6), executor="ray"))
    assert man["ray_nodes"]  # the shard ran in a Ray task
    assert said(caplog, "remote") == ["remote: 3/12 rows (25%)", "remote: 6/12 rows (50%)",
                                      "remote: 9/12 rows (75%)", "remote: 12/12 rows (100%)"]


def test_a_retried_task_does_not_count_twice(store, tmp_path, caplog, monkeypatch, ray_up):
    """The first attempt reports 3/4 of its work and its worker dies; Ray runs the task again, which reports
    from 0: the count never goes past the shard's rows and ends at them."""
    monkeypatch.delenv("BONFORGE_QUIET", raising=False)
    monkeypatch.setattr(shard_progress, "REPORT_EVERY_S", 0.0)
    monkeypatch.setattr(shard_progress, "POLL_S", 0.05)
    marker = str(tmp_path / "attempted")

    def dies_once(shard: pa.Table, progress=None) -> pa.Table:
        first = not os.path.exists(marker)
        open(marker, "a").close()
        for k in range(1, 4):
            progress(k, 4)
            time.sleep(0.5)
        if first:
            os._exit(1)
        return shard

    with caplog.at_level(logging.INFO, "bonforge"):
        man = run_node(store, node("retried", dies_once, executor="ray"))
    assert man["rows"] == 12
    lines = said(caplog, "retried")
    assert "retried: 9/12 rows (75%)" in lines  # the first attempt's count was shown
    assert lines[-1] == "retried: 12/12 rows (100%)"
    assert all(int(x.split(": ")[1].split("/")[0]) <= 12 for x in lines), lines
