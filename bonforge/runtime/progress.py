"""A stage's progress, in rows, with its rate and the time left: a rich bar on a terminal, else a log line
(logger ``bonforge``) at every 10 % and at least every 30 s, so that a log (CI, ``deploy``, a file)
shows a long stage moving. ``BONFORGE_QUIET`` silences both. Stages running at once (a streaming build):
the first has the bar, the others log lines.

The rows are the stage's input rows (a sampling stage's problems, a verification stage's candidates; an
export's rows written) as its shards finish (a shard whose every row is reused from the store, as it is
written), and, for a stage that reports its work, while they run (``bonforge.engine.shard_progress``). The
rows of the shards an interrupted run had written count as done from the start, not in the rate.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import threading
import time
from typing import Callable, Iterator

log = logging.getLogger("bonforge")

STEP = 0.1  # a log line each time another tenth of the rows is done
EVERY_S = 30.0  # and one at least this often, even when no shard finished
_BAR = threading.Lock()  # held by the stage whose bar is live (stages run at once in a streaming build)


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class LogProgress:
    """Counts rows and says so in log lines: when the rows done cross the next ``step`` of ``total``, and
    after ``every_s`` seconds without a line (a thread wakes for those), then once at the end."""

    def __init__(self, label: str, total: int | None, done: int = 0, step: float = STEP, every_s: float = EVERY_S,
                 clock: Callable[[], float] = time.monotonic):
        self.label, self.total, self.done, self.start_done = label, total, done, done
        self.step, self.every_s, self.clock = step, every_s, clock
        self.t0 = self.last = clock()
        self.said = done  # the rows done at the last line (none yet: the rows done before)
        self.next_mark = self._mark_after(done)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name=f"progress {label}", daemon=True)

    def _mark_after(self, done: int) -> int | None:
        """The row count of the next tenth above ``done`` (None without a total, or with every row done)."""
        if not self.total or done >= self.total:
            return None
        tenth = self.total * self.step
        return min(self.total, math.ceil(round((math.floor(round(done / tenth, 9)) + 1) * tenth, 9)))

    def line(self) -> str:
        elapsed = self.clock() - self.t0
        rate = (self.done - self.start_done) / elapsed if elapsed > 0 else 0.0
        if self.total:
            text = f"{self.label}: {self.done}/{self.total} rows ({100 * self.done / self.total:.0f}%)"
        else:
            text = f"{self.label}: {self.done} rows"
        text += f", {rate:.1f} rows/s, elapsed {_clock(elapsed)}"
        if self.total and self.done < self.total:
            text += f", ETA {_clock((self.total - self.done) / rate)}" if rate > 0 else ", ETA unknown"
        return text

    def _say(self) -> None:
        self.last, self.said = self.clock(), self.done
        log.info("%s", self.line())

    def advance(self, n: int) -> None:
        with self._lock:
            self.done += n
            if self.next_mark is not None and self.done >= self.next_mark:
                self.next_mark = self._mark_after(self.done)
                self._say()
            elif self.clock() - self.last >= self.every_s:
                self._say()

    def _tick(self) -> None:
        while not self._stop.wait(min(self.every_s, 5.0)):
            with self._lock:
                if self.clock() - self.last >= self.every_s:
                    self._say()

    def __enter__(self) -> LogProgress:
        self._ticker.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._ticker.join()
        with self._lock:
            if exc[0] is None and self.done != self.said:
                self._say()  # where it ended, when the last line said less (no total, or a total not reached)


@contextlib.contextmanager
def stage_progress(label: str, total: int | None, done: int = 0) -> Iterator[Callable[[int], None]]:
    """A function that adds rows done to the progress of stage ``label`` (``total`` rows, None where unknown;
    ``done`` of them done already)."""
    if os.environ.get("BONFORGE_QUIET"):
        yield lambda n: None
        return
    if not sys.stderr.isatty() or not _BAR.acquire(blocking=False):  # a terminal shows one live bar at once
        with LogProgress(label, total, done) as progress:
            yield progress.advance
        return
    try:
        yield from bar(label, total, done)
    finally:
        _BAR.release()


def bar(label: str, total: int | None, done: int, console=None) -> Iterator[Callable[[int], None]]:
    """The terminal's bar: rows done of ``total``, the rate and the time left (``console``: rich's, default
    the terminal's)."""
    from rich.markup import escape
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task) -> Text:
            return Text(f"{task.speed:.1f} rows/s" if task.speed else "- rows/s")

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("rows"),
               Rate(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, transient=False, console=console) as progress:
        # the label as it is (``verdicts[qwen]`` is no markup); the rate counts this run's rows only
        task = progress.add_task(escape(label), total=total, completed=done)
        yield lambda n: progress.advance(task, n)
