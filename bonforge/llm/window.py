"""How many requests an endpoint gets at once: a window that adapts to what the server answers.

The window starts at ``start_concurrency`` and doubles each round trip (one more per answer) until the server first
says "too many" (HTTP 429, 503, or a timeout: ``CONGESTED``). A refusal shrinks the window to ``BETA`` of the
requests in flight with the refused one, itself included (the fewest of one overload's refusals: ``peak``, what
the window knows of the server's limit): a server that takes K at once holds it near K, not between K/2 and K.
From then on:

- below ``peak - 1`` it grows by one per window of answers (additive increase);
- from ``peak - 1`` to ``peak`` it waits ``PLATEAU`` windows of answers before it asks for the refused size again:
  a server that keeps its limit refuses once in ``PLATEAU`` round trips, not every one or two;
- past ``peak`` (the server took the refused size: its limit rose) it grows by its distance to ``peak`` per window
  of answers, doubling the distance each round trip: a server that starts taking 16 where it took 8 is found in
  a few round trips.

Refusals of requests sent before the last shrink do not shrink it again (one overload, one decrease). A refusal of
a request sent after it, before any such request was answered, says that shrink was not enough (the server's
limit fell): the window halves. An overload below ``peak`` leaves ``peak`` as it was, the next one in a row
lowers it (a server that counts an answered request in flight a moment longer refuses one at its own limit now
and then; a server whose limit fell refuses again). The recipe's ``max_concurrency`` is the ceiling.

A refused request waits out its delay (``Retry-After``) outside the window, then goes before every request not
sent yet (``Slots``). Asking for a size the server refused costs a refused request that delay, so the window does
not grow to ``peak`` or past it while the requests waiting for a place would all be sent before a refused one
came back (the end of a batch): a batch does not end waiting on one refused request.

``Window`` is the state (it outlives one batch: the engine keeps it from shard to shard); ``Slots`` lets the
requests of one event loop wait for it. Its history (when the window changed size) goes into the stage's
manifest and the run record.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass
from typing import AsyncIterator, Callable

from bonforge.llm.base import retry_delay

BETA = 0.9  # the share of the window kept at a refusal
PLATEAU = 10  # windows of answers between reaching one below the last refusal's size and asking for that size
CONGESTED, OK, NEUTRAL = "congested", "ok", "neutral"  # how a request ended, for the window
HISTORY_POINTS = 2000  # the most history points kept (older ones are thinned out)
RTT_WEIGHT = 1 / 8  # the weight of the latest answer in the moving average of the round trip


@dataclass
class Ticket:
    """One request's hold on the window: the shrinks before it was sent, when it was sent, the requests in flight
    with it (itself included), how it ended and, when refused, the server's ``Retry-After`` in seconds (None: none
    given)."""

    epoch: int
    sent: float
    load: int
    outcome: str = NEUTRAL
    retry_after: float | None = None


INITIAL = 1  # the window a batch starts with, by default (slow start from there; a teacher's start_concurrency)


class Window:
    """The adaptive window of one endpoint (``ceiling``: the most requests in flight)."""

    def __init__(self, ceiling: int, clock: Callable[[], float] | None = None, initial: int = INITIAL):
        """``clock``: seconds that only go forward (default the monotonic clock: a step of the wall clock does not
        stretch a round trip); the history is stamped in epoch seconds from it."""
        self.ceiling, self.clock = ceiling, clock or time.monotonic
        self.since = 0.0 if clock else time.time() - self.clock()  # the clock's reading -> epoch seconds
        self.size = float(min(ceiling, initial))
        self.slow_start = True
        self.in_flight = self.epoch = 0
        self.peak = 0.0  # the fewest requests in flight at a refusal of the last overload
        self.cut = BETA  # the share of them the window kept at the last overload
        self.unproven = False  # no request sent since the last shrink has been answered yet
        self.doubted = False  # the last overload came below ``peak`` and left it as it was
        self.waiting = 0  # requests waiting for a place (kept by ``Slots``)
        self.rtt = 0.0  # seconds from sending a request to its answer (moving average)
        self.back = 0.0  # the longest the last refused request waits before it is sent again
        self.refused = self.answered = 0
        self.history: list[list[float]] = [[self._stamp(), self.allowed]]  # [epoch seconds, window]

    def _stamp(self) -> float:
        return round(self.clock() + self.since, 3)

    @property
    def allowed(self) -> int:
        return max(1, min(self.ceiling, int(self.size)))

    def open(self) -> bool:
        return self.in_flight < self.allowed

    def take(self) -> Ticket:
        self.in_flight += 1
        return Ticket(self.epoch, self.clock(), self.in_flight)

    def done(self, ticket: Ticket) -> None:
        """``ticket``'s request ended with ``ticket.outcome``."""
        self.in_flight -= 1
        was = self.allowed
        if ticket.outcome == OK:
            self.answered += 1
            took = max(0.0, self.clock() - ticket.sent)
            self.rtt = took if not self.rtt else self.rtt + RTT_WEIGHT * (took - self.rtt)
            if ticket.epoch == self.epoch:
                self.unproven = False
            self._grow()
        elif ticket.outcome == CONGESTED:
            self.refused += 1
            self.back = retry_delay(1, ticket.retry_after, spread=1.0)
            self._shrink(ticket)
        if self.allowed != was:
            self._note()

    def _shrink(self, ticket: Ticket) -> None:
        if ticket.epoch == self.epoch:  # the first refusal since the last shrink: a new overload
            self.cut = 0.5 if self.unproven else BETA
            if self.slow_start or self.doubted or ticket.load >= self.peak:
                self.peak, self.doubted = float(ticket.load), False
            else:  # below the limit known: maybe a race; the next overload says
                self.doubted = True
            self.size = max(1.0, ticket.load * self.cut)
            self.slow_start = False
            self.unproven = True
            self.epoch += 1
        elif ticket.epoch == self.epoch - 1 and ticket.load < self.peak:  # the overload's, with fewer in flight
            self.peak = float(ticket.load)
            self.size = min(self.size, max(1.0, ticket.load * self.cut))

    def _grow(self) -> None:
        if self.slow_start:
            step = 1.0
        elif self.size < self.peak - 1:
            step = 1.0 / self.size
        elif self.size < self.peak:
            step = 1.0 / (PLATEAU * self.size)
        else:
            step = max(1.0, self.size - self.peak) / self.size
        size = min(float(self.ceiling), self.size + step)
        probing = not self.slow_start and int(size) > self.allowed and int(size) >= int(self.peak)
        if probing and self.waiting * self.rtt < self.back * self.allowed:
            return  # the requests waiting would all be sent before a refused one came back
        self.size = size

    def _note(self) -> None:
        self.history.append([self._stamp(), self.allowed])
        if len(self.history) > HISTORY_POINTS:  # keep the first point and every other later one
            self.history = self.history[:1] + self.history[2::2]

    def summary(self) -> dict:
        """What the manifest keeps: the ceiling, the window now, the refusals and answers it saw, its history."""
        return {"ceiling": self.ceiling, "window": self.allowed, "answered": self.answered, "refused": self.refused,
                "history": [list(p) for p in self.history]}


class Closed(Exception):
    """The slots were closed (``Slots.close``): the request is not to be sent."""


class Slots:
    """The window as the requests of one event loop wait for it (the window is not bound to a loop): places go
    in the order requests came, a request sent again (after a refusal or an error) before every request not sent
    yet, so that it does not end its batch."""

    def __init__(self, window: Window):
        self.window = window
        self.queues: tuple[deque, deque] = (deque(), deque())  # the futures of requests sent again, of first tries
        self.count = 0  # the requests waiting here (a cancelled one leaves its future in a queue)
        self.closed = False

    def _waits(self, change: int) -> None:
        self.count += change
        self.window.waiting += change

    async def close(self) -> None:
        """No more requests: those waiting for a place, and any that come, get ``Closed``; those in flight end
        as they end."""
        self.closed = True
        for queue in self.queues:
            while queue:
                place = queue.popleft()
                if not place.done():
                    place.set_exception(Closed())
                    self._waits(-1)

    def _hand_out(self) -> None:
        """Give the free places to the requests waiting, those sent again first."""
        for queue in self.queues:
            while queue and self.window.open():
                place = queue.popleft()
                if not place.done():  # a cancelled one was counted out when it was cancelled
                    self._waits(-1)
                    place.set_result(self.window.take())

    @contextlib.asynccontextmanager
    async def held(self, again: bool = False) -> AsyncIterator[Ticket]:
        """A place in the window for the block (``again``: the request was sent before); set the ticket's
        ``outcome`` before leaving it."""
        if self.closed:
            raise Closed()
        if self.window.open() and not self.count:
            ticket = self.window.take()
        else:
            place = asyncio.get_running_loop().create_future()
            self.queues[0 if again else 1].append(place)
            self._waits(1)
            try:
                ticket = await place
            except asyncio.CancelledError:
                if place.cancelled():
                    self._waits(-1)
                elif place.exception() is None:  # handed a place as it was cancelled: give it back
                    self._release(place.result())
                raise
            if self.closed:  # closed after this request was handed its place, before it ran
                self._release(ticket)
                raise Closed()
        try:
            yield ticket
        finally:
            self._release(ticket)

    def _release(self, ticket: Ticket) -> None:
        self.window.done(ticket)
        self._hand_out()
