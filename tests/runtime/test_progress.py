"""Progress a log can read: without a terminal, a line at every tenth of a stage's rows and at least every
30 s, each with the rows done, the rate and the time left; a resumed stage starts where its shards are."""

from __future__ import annotations

import logging
import time

import pyarrow as pa
import pytest

from bonforge.engine import run_node
from bonforge.runtime.progress import LogProgress, stage_progress
from bonforge.stage import Stage


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "bonforge"]


def test_a_line_per_tenth_with_rate_and_eta(caplog):
    clock = Clock()
    with caplog.at_level(logging.INFO, "bonforge"), LogProgress("verdicts[t]", 200, clock=clock) as p:
        for _ in range(40):
            clock.now += 0.5
            p.advance(5)  # 10 rows/s
    said = lines(caplog)
    assert len(said) == 10
    assert said[0] == "verdicts[t]: 20/200 rows (10%), 10.0 rows/s, elapsed 0:02, ETA 0:18"
    assert said[4] == "verdicts[t]: 100/200 rows (50%), 10.0 rows/s, elapsed 0:10, ETA 0:10"
    assert said[-1] == "verdicts[t]: 200/200 rows (100%), 10.0 rows/s, elapsed 0:20"


def test_a_line_every_30_s_when_no_tenth_is_crossed(caplog):
    clock = Clock()
    with caplog.at_level(logging.INFO, "bonforge"), LogProgress("candidates[m]", 10_000, clock=clock) as p:
        for _ in range(5):
            clock.now += 15
            p.advance(100)
    assert lines(caplog) == [
        "candidates[m]: 200/10000 rows (2%), 6.7 rows/s, elapsed 0:30, ETA 24:30",
        "candidates[m]: 400/10000 rows (4%), 6.7 rows/s, elapsed 1:00, ETA 24:00",
        "candidates[m]: 500/10000 rows (5%), 6.7 rows/s, elapsed 1:15, ETA 23:45"]  # the end: where it stopped


def test_a_stalled_stage_still_says_so(caplog):
    """No shard finishes (one long shard): a line comes every ``every_s`` all the same."""
    with caplog.at_level(logging.INFO, "bonforge"), LogProgress("candidates[slow]", 12, every_s=0.2):
        time.sleep(0.7)
    said = lines(caplog)
    assert len(said) >= 2 and said[0].startswith("candidates[slow]: 0/12 rows (0%), 0.0 rows/s, elapsed 0:00, "
                                                 "ETA unknown")


def test_without_a_terminal_the_stage_logs(caplog, monkeypatch):
    monkeypatch.delenv("BONFORGE_QUIET", raising=False)
    with caplog.at_level(logging.INFO, "bonforge"), stage_progress("problems", 4) as advance:
        advance(4)
    assert lines(caplog)[0].startswith("problems: 4/4 rows (100%)")
    caplog.clear()
    monkeypatch.setenv("BONFORGE_QUIET", "1")
    with caplog.at_level(logging.INFO, "bonforge"), stage_progress("problems", 4) as advance:
        advance(4)
    assert lines(caplog) == []


def test_on_a_terminal_stages_running_at_once_share_it_one_bar_and_log_lines(caplog, monkeypatch):
    """A terminal holds one live bar: a second stage at once (a streaming build) logs instead of failing."""
    from bonforge.runtime import progress

    monkeypatch.delenv("BONFORGE_QUIET", raising=False)
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: True, raising=False)
    bars = []

    def bar(label, total, done):
        bars.append(label)
        yield lambda n: None

    monkeypatch.setattr(progress, "bar", bar)
    with caplog.at_level(logging.INFO, "bonforge"), stage_progress("candidates[a]", 4) as a:
        with stage_progress("verdicts[a]", 4) as v:
            a(4)
            v(4)
    assert bars == ["candidates[a]"]
    assert lines(caplog)[0].startswith("verdicts[a]: 4/4 rows (100%)")
    with stage_progress("genselect", 1):  # the bar is free again
        pass
    assert bars == ["candidates[a]", "genselect"]


class Boom(RuntimeError):
    pass


def test_a_resumed_stage_starts_at_its_written_shards(store, caplog, monkeypatch):
    monkeypatch.delenv("BONFORGE_QUIET", raising=False)
    table = pa.table({"problem_id": [f"p{i:03d}" for i in range(10)], "x": list(range(10))})

    def compute(shard, fail_on=None):
        if shard.column("problem_id")[0].as_py() == fail_on:
            raise Boom(fail_on)
        return shard

    def node(fn):
        return Stage("demo", "1", compute=fn, table=lambda i: table, shard_rows=2).bind({}, {})

    with pytest.raises(Boom):
        run_node(store, node(lambda s: compute(s, "p006")))
    caplog.clear()
    with caplog.at_level(logging.INFO, "bonforge"):
        run_node(store, node(compute))
    said = [x.split(",")[0] for x in lines(caplog) if x.startswith("demo:")]
    assert said == ["demo: resuming", "demo: 8/10 rows (80%)", "demo: 10/10 rows (100%)"]  # from 6 rows, not 0


def test_the_terminal_bar_names_the_teacher_and_shows_rows_rate_and_eta():
    import contextlib
    import io

    from rich.console import Console

    from bonforge.runtime.progress import bar

    out = io.StringIO()
    with contextlib.contextmanager(bar)("verdicts[qwen-7b]", 100, 20, Console(file=out, width=150)) as advance:
        for _ in range(8):
            time.sleep(0.05)
            advance(10)
    last = out.getvalue().splitlines()[-1]
    assert "verdicts[qwen-7b]" in last and "100/100 rows" in last and "rows/s" in last and "ETA" in last, last
