"""How one ``SandboxPool.run`` spreads its requests over the pool's workers: a request (``Job``, run at most
once to an outcome), each worker's requests in flight (its lane, in ``Lanes``: an idle worker steals a request
waiting behind a long one), and ``Background``, the thread a driver or a batch runs on."""

from __future__ import annotations

import collections
import json
import queue
import threading
import time


class Background:
    """``fn(*args)`` on a daemon thread. ``result()`` waits in short steps: a process's SIGINT may land on
    any thread, and a main thread blocked in one long wait would not see Ctrl-C until the work was done.
    Being a daemon, it never holds up the interpreter's exit, which closes the pools (and so stops it)."""

    def __init__(self, fn, *args):
        self._value = self._error = None
        self._thread = threading.Thread(target=self._call, args=(fn, args), daemon=True)
        self._thread.start()

    def _call(self, fn, args) -> None:
        try:
            self._value = fn(*args)
        except BaseException as e:  # handed to the caller of result()
            self._error = e

    def result(self):
        while self._thread.is_alive():
            self._thread.join(0.2)
        if self._error is not None:
            raise self._error
        return self._value


STEAL_AFTER_S = 0.05  # how long a request must have run before an idle worker takes the one waiting behind it


class Lanes:
    """The requests in flight on each worker of one ``run``, for an idle worker to steal from."""

    def __init__(self):
        self._lock = threading.Lock()
        self._lanes: list[collections.deque] = []

    def add(self, lane: collections.deque) -> None:
        with self._lock:
            self._lanes.append(lane)

    def remove(self, lane: collections.deque) -> None:
        with self._lock:
            self._lanes.remove(lane)

    def steal(self, mine: collections.deque, todo: queue.Queue, closed) -> Job | None:
        """A request waiting behind one that has run ``STEAL_AFTER_S`` on another worker (marked stolen: the
        other worker still runs its copy, and the first answer wins); waits while one may come; None when no
        worker holds one waiting (or ``todo`` got work again: the caller takes that first)."""
        while not closed() and todo.empty():
            waiting = False
            with self._lock:
                for lane in self._lanes:
                    if lane is mine or len(lane) < 2:
                        continue
                    for job, _ in list(lane)[1:]:
                        if not (job.done or job.stolen):
                            waiting = True
                            if time.monotonic() - lane[0][1] >= STEAL_AFTER_S:
                                job.stolen = True
                                return job
            if not waiting:
                return None
            time.sleep(0.01)
        return None


class Job:
    __slots__ = ("index", "request", "attempts", "deaths", "errors", "start", "outcome", "on_outcome", "done", "stolen",
                 "_line")

    def __init__(self, index: int, request, on_outcome=None):  # request: a ``wire.Request``
        self.index, self.on_outcome = index, on_outcome
        self.done = self.stolen = False  # finished (a second answer, of a stolen copy, is dropped); stolen once
        self.request = request
        self.attempts = self.deaths = 0
        self.errors: list[str] = []
        self.start: float | None = None
        self.outcome: dict | None = None
        self._line: bytes | None = None

    def line(self) -> bytes:
        """The request as its line on the channel (encoded once, however often it is sent)."""
        if self._line is None:
            self._line = json.dumps(self.request.doc()).encode() + b"\n"
        return self._line
