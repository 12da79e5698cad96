"""How many requests an endpoint gets at once: a window that adapts to what the server answers.

The window starts at one request and doubles each round trip (one more per answer) until the server first
says "too many" (HTTP 429, 503, or a timeout: ``CONGESTED``), which halves it; from then on it grows by one
per window of answers and a refusal shrinks it to ``BETA`` of its size (additive increase, multiplicative
decrease): a server that takes K at once holds the window between 0.9 K and K + 1, not between K/2 and K.
Past the size of the last refusal it grows by its distance to that size per window of answers, doubling the
distance each round trip: a server that starts taking more is found in a few round trips, not one per
request it takes more.
Refusals of requests sent before the last shrink do not shrink it again (one overload, one decrease). The
recipe's ``max_concurrency`` is the ceiling.

A refused request leaves the window and waits out its delay outside it; since the window shrank below the
requests still in flight, its slot goes to no one until answers come back.

``Window`` is the state (it outlives one batch: the engine keeps it from shard to shard); ``Slots`` lets the
requests of one event loop wait for it. Its history (when the window changed size) goes into the stage's
manifest and the run record.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import AsyncIterator, Callable

BETA = 0.9  # the share of the window kept at a refusal
CONGESTED, OK, NEUTRAL = "congested", "ok", "neutral"  # how a request ended, for the window
HISTORY_POINTS = 2000  # the most history points kept (older ones are thinned out)


@dataclass
class Ticket:
    """One request's hold on the window: the shrinks before it was sent, and how it ended."""

    epoch: int
    outcome: str = NEUTRAL


INITIAL = 1  # the window a batch starts with, by default (slow start from there; a teacher's start_concurrency)


class Window:
    """The adaptive window of one endpoint (``ceiling``: the most requests in flight)."""

    def __init__(self, ceiling: int, clock: Callable[[], float] = time.time, initial: int = INITIAL):
        self.ceiling, self.clock = ceiling, clock
        self.size = float(min(ceiling, initial))
        self.slow_start = True
        self.in_flight = self.epoch = 0
        self.peak = 0.0  # the size at the last refusal
        self.refused = self.answered = 0
        self.history: list[list[float]] = [[round(clock(), 3), self.allowed]]  # [epoch seconds, window]

    @property
    def allowed(self) -> int:
        return max(1, min(self.ceiling, int(self.size)))

    def open(self) -> bool:
        return self.in_flight < self.allowed

    def take(self) -> Ticket:
        self.in_flight += 1
        return Ticket(self.epoch)

    def done(self, ticket: Ticket) -> None:
        """``ticket``'s request ended with ``ticket.outcome``."""
        self.in_flight -= 1
        was = self.allowed
        if ticket.outcome == OK:
            self.answered += 1
            step = 1.0 if self.slow_start else max(1.0, self.size - self.peak) / self.size
            self.size = min(float(self.ceiling), self.size + step)
        elif ticket.outcome == CONGESTED:
            self.refused += 1
            if ticket.epoch == self.epoch:  # the first refusal since the last shrink
                self.peak = self.size
                self.size = max(1.0, self.size * (0.5 if self.slow_start else BETA))
                self.slow_start = False
                self.epoch += 1
        if self.allowed != was:
            self._note()

    def _note(self) -> None:
        self.history.append([round(self.clock(), 3), self.allowed])
        if len(self.history) > HISTORY_POINTS:  # keep the first point and every other later one
            self.history = self.history[:1] + self.history[2::2]

    def summary(self) -> dict:
        """What the manifest keeps: the ceiling, the window now, the refusals and answers it saw, its history."""
        return {"ceiling": self.ceiling, "window": self.allowed, "answered": self.answered, "refused": self.refused,
                "history": [list(p) for p in self.history]}


class Closed(Exception):
    """The slots were closed (``Slots.close``): the request is not to be sent."""


class Slots:
    """The window as the requests of one event loop wait for it (an asyncio condition is bound to its loop;
    the window is not)."""

    def __init__(self, window: Window):
        self.window = window
        self.changed = asyncio.Condition()
        self.closed = False

    async def close(self) -> None:
        """No more requests: those waiting for a place, and any that come, get ``Closed``; those in flight end
        as they end."""
        self.closed = True
        async with self.changed:
            self.changed.notify_all()

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[Ticket]:
        """A place in the window for the block; set the ticket's ``outcome`` before leaving it."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.closed or self.window.open())
            if self.closed:
                raise Closed()
            ticket = self.window.take()
        try:
            yield ticket
        finally:
            self.window.done(ticket)
            async with self.changed:  # wake as many waiters as there are free places (in the order they came)
                self.changed.notify(max(0, self.window.allowed - self.window.in_flight))
