"""A build's budget (``bonforge run --budget USD``, ``budget:`` in a recipe; docs/cost.md): no request is sent
that could take the spend over it.

Every try of a request to an endpoint with token prices (``bonforge.llm.prices``) holds its worst case while it
is in flight: its prompt at one token per byte plus ``TEMPLATE_TOKENS`` per message, and ``max_tokens`` of
output, all uncached. A try goes out only when what was spent, what the tries in flight hold and its own worst
case fit in the budget; while they do not, it waits for the tries in flight to settle (each then counts what it
cost: its reported tokens; nothing when the server refused it with an HTTP error or it was never sent; its worst
case where the server may have billed it without an answer bonforge could read: usage it cannot trust, a body
that is not an answer, a time-out or a connection lost after sending, a cancel). A request waiting to be tried
again holds nothing: a try waiting for room holds a slot of the window, so a hold kept over the wait would
leave both waiting for each other. When nothing is in flight and a try still does not fit, the budget is
exhausted: that try and every later one fail with ``OverBudget`` and the build stops, having kept what it
finished. What is left then is less than one request's worst case.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Iterator

from bonforge.errors import BonforgeError
from bonforge.llm.base import EngineError, Request
from bonforge.llm.prices import Prices, token_cost, worst_case

WAIT_S = 0.02  # how often a request waiting for room looks again


class OverBudget(EngineError):
    """A request that could take the spend over the budget was not sent. Not retried; a batch takes it as a
    sample that failed alone (the others are kept)."""


class BudgetStopped(BonforgeError):
    """The build stopped at its budget (its message: the line ``Budget.line`` says); what it finished is kept."""


class Budget:
    """What a build may spend (``limit_usd``), what it spent and what its requests in flight hold; shared by
    every engine of the process (teachers sampling side by side, judges), each on its own event loop."""

    def __init__(self, limit_usd: float):
        self.limit_usd = limit_usd
        self.spent_usd = 0.0
        self.held_usd = 0.0
        self.in_flight = 0
        self.requests = 0
        self.exhausted = False
        self.refused = 0.0  # the worst case of the request that found no room
        self._lock = threading.Lock()

    async def reserve(self, worst: float, where: str) -> None:
        """Hold ``worst`` for a request about to be sent, waiting while the requests in flight leave no room;
        OverBudget once nothing is in flight and it still does not fit."""
        while True:
            with self._lock:
                if not self.exhausted and self.spent_usd + self.held_usd + worst <= self.limit_usd:
                    self.held_usd += worst
                    self.in_flight += 1
                    return
                if self.exhausted or self.in_flight == 0:
                    self.exhausted, self.refused = True, max(self.refused, worst)
                    raise OverBudget(f"{where}: not sent: over the budget")
            await asyncio.sleep(WAIT_S)

    def settle(self, worst: float, cost: float) -> None:
        """A request held ``worst`` and cost ``cost`` (0: not billed)."""
        with self._lock:
            self.held_usd = max(self.held_usd - worst, 0.0)
            self.in_flight -= 1
            self.spent_usd += cost
            self.requests += cost > 0

    @property
    def left_usd(self) -> float:
        return max(self.limit_usd - self.spent_usd, 0.0)

    def json(self) -> dict:
        """What the run record keeps (``budget``): the limit, what was spent and left, the requests billed, and
        whether the budget stopped the build (with the worst case of the request that found no room)."""
        return {"limit_usd": self.limit_usd, "spent_usd": round(self.spent_usd, 6),
                "left_usd": round(self.left_usd, 6), "requests": self.requests, "stopped": self.exhausted,
                **({"refused_usd": round(self.refused, 6)} if self.exhausted else {})}

    def line(self) -> str:
        return line(self.json())


def line(budget: dict) -> str:
    """The one line a build with a budget ends with (``budget``: ``Budget.json``)."""
    out = f"budget: spent ${budget['spent_usd']:.4f} of ${budget['limit_usd']:g}, ${budget['left_usd']:.4f} left"
    if budget["stopped"]:
        out += (f"; stopped: the next request could cost up to ${budget['refused_usd']:.4f}. Every finished row is "
                "kept: a rerun with a larger budget pays only for what is new")
    return out


_active: Budget | None = None


def active() -> Budget | None:
    return _active


@contextlib.contextmanager
def spending(limit_usd: float | None) -> Iterator[Budget | None]:
    """The budget of the build in the block (None: no budget)."""
    global _active
    _active = Budget(limit_usd) if limit_usd is not None else None
    try:
        yield _active
    finally:
        _active = None


def request_worst(prices: Prices | None, request: Request) -> float:
    """The most one sample of ``request`` may cost (module docstring)."""
    return worst_case(prices, request.prompt_bound(), request.max_tokens)


class Bill:
    """One sample's charges against the active budget, if any, one try at a time: ``async with bill.trying()``
    around each try holds its worst case from ``reserve`` (called once the try has its window slot) to the
    try's end, and then counts what it cost: its worst case, unless the server refused it (``unbilled``) or
    answered (``paid``)."""

    def __init__(self, prices: Prices | None, request: Request, where: str):
        self.budget = active() if prices is not None and prices.input is not None and prices.output is not None \
            else None
        self.prices, self.request, self.where = prices, request, where
        self.worst = request_worst(prices, request) if self.budget else 0.0
        self.held, self.cost = False, 0.0

    async def reserve(self) -> None:
        if self.budget is not None and not self.held:
            await self.budget.reserve(self.worst, self.where)
            self.held, self.cost = True, self.worst

    def unbilled(self) -> None:
        """The server refused this try with an HTTP error, or it was never sent: it cost nothing."""
        self.cost = 0.0

    def paid(self, fields: dict) -> dict:
        """``fields`` (a parsed answer) as they are; the charge is what their tokens cost, or the worst case
        where the server reported none it could trust (a prompt refused as too long costs nothing)."""
        cost = 0.0 if "rejected" in fields else token_cost(
            self.prices, fields.get("prompt_tokens"), fields.get("completion_tokens"), fields.get("cached_tokens", 0))
        self.cost = self.worst if cost is None else cost
        return fields

    @contextlib.asynccontextmanager
    async def trying(self):
        try:
            yield self
        finally:
            if self.held:
                self.budget.settle(self.worst, self.cost)
                self.held = False
