"""Rows done while a shard runs, for the stage's progress (``bonforge.runtime.progress``).

A stage whose compute reports its work (``Stage.reports``) gets ``progress=`` with each shard: a function it
calls as ``progress(done, of)`` when ``done`` of the shard's ``of`` units of work are done (samples drawn,
candidates judged; any unit, counted from 0 in each call of compute). The progress then shows that fraction
of the shard's rows while the shard runs. In process the call reaches the stage's ``ShardCounts`` at once;
in a Ray task it is sent (at most every ``REPORT_EVERY_S``) to a small actor, ``Reports``, that the driver
reads every ``POLL_S`` while it waits for shards. Stages stay free of Ray: they only see a function.

Exactly once: the count shown for a running shard only grows (a retried task that starts again from 0
adds nothing until it passes what its earlier attempt reported), a report that comes after its shard is
written is dropped, and writing a shard replaces its count by the shard's rows.
"""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Callable

REPORT_EVERY_S = 0.5  # a Ray task sends a shard's count at most this often
POLL_S = 1.0  # the driver reads the counts of its Ray tasks this often while it waits for one to finish


class ShardCounts:
    """The rows a stage's running shards have done, added to its progress (``advance``) as they grow, and
    each shard's remaining rows once it is written."""

    def __init__(self, advance: Callable[[int], None]):
        self.advance = advance
        self.rows: dict[int, int] = {}  # a running shard -> its rows
        self.shown: dict[int, int] = {}  # a running shard -> its rows counted so far
        self.written: set[int] = set()
        self._lock = threading.Lock()

    def start(self, shard: int, rows: int) -> Callable[[int, int], None]:
        """Shard ``shard`` (``rows`` rows) starts: the ``progress`` its compute calls in this process."""
        with self._lock:
            if shard not in self.written:
                self.rows[shard] = rows
        return partial(self.report, shard)

    def report(self, shard: int, done: int, of: int) -> None:
        """``done`` of ``of`` units of ``shard`` are done (ignored once it is written, or below what it
        reported before)."""
        with self._lock:
            rows = self.rows.get(shard)
            if rows is None or of <= 0:
                return
            now = min(rows, rows * max(done, 0) // of)
            before = self.shown.get(shard, 0)
            if now > before:
                self.shown[shard] = now
                self.advance(now - before)

    def finish(self, shard: int, rows: int) -> None:
        """Shard ``shard`` is written with ``rows`` rows: its count becomes those rows (once, whatever
        it had reported)."""
        with self._lock:
            if shard in self.written:
                return
            self.written.add(shard)
            self.rows.pop(shard, None)
            rest = rows - self.shown.pop(shard, 0)
            if rest:
                self.advance(rest)


class Reports:
    """A Ray actor (no CPU): the latest ``(done, of)`` of each shard that reported from a Ray task."""

    def __init__(self) -> None:
        self.latest: dict[int, tuple[int, int]] = {}

    def report(self, shard: int, done: int, of: int) -> None:
        self.latest[shard] = (done, of)

    def take(self) -> dict[int, tuple[int, int]]:
        latest, self.latest = self.latest, {}
        return latest


class RayReporter:
    """``progress`` inside a Ray task: sends the shard's count to the ``Reports`` actor, at most every
    ``every_s`` (the first call at once), without waiting for an answer."""

    def __init__(self, reports, shard: int, every_s: float):
        self.reports, self.shard, self.every_s = reports, shard, every_s
        self.last: float | None = None

    def __call__(self, done: int, of: int) -> None:
        now = time.monotonic()
        if self.last is not None and now - self.last < self.every_s:
            return
        self.last = now
        self.reports.report.remote(self.shard, done, of)


class RayCounts:
    """The driver's side for shards that run as Ray tasks: the ``Reports`` actor (started on first use),
    read into ``counts`` by ``poll`` (at most every ``POLL_S``, never waiting for the actor: a read asked
    for is taken at a later poll once it is there)."""

    def __init__(self, counts: ShardCounts):
        self.counts = counts
        self.actor = self.asked = None
        self.last = time.monotonic()

    def start(self, shard: int, rows: int) -> RayReporter:
        import ray

        if self.actor is None:
            self.actor = ray.remote(num_cpus=0)(Reports).remote()
        self.counts.start(shard, rows)
        return RayReporter(self.actor, shard, REPORT_EVERY_S)

    def poll(self) -> None:
        if self.actor is None or time.monotonic() - self.last < POLL_S:
            return
        self.last = time.monotonic()
        import ray

        if self.asked is not None:
            if not ray.wait([self.asked], timeout=0)[0]:
                return
            for shard, (done, of) in ray.get(self.asked).items():
                self.counts.report(shard, done, of)
        self.asked = self.actor.take.remote()

    def close(self) -> None:
        if self.actor is not None:
            import ray

            ray.kill(self.actor)
            self.actor = None
