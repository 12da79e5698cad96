"""The adaptive request window: slow start, the plateau below the last refusal's size, one decrease per overload,
a falling limit halved, the ceiling, its history, and the async slots that never let more requests through than
it allows and give a refused request the next place. The rules are checked against a server simulated in
virtual time (``serve``): no test waits on a clock."""

from __future__ import annotations

import asyncio
import heapq
import random
from collections import deque

import pytest

from bonforge.llm import window as w
from bonforge.llm.window import CONGESTED, NEUTRAL, OK, Closed, Slots, Window


class Clock:
    """Virtual time."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def end(window: Window, outcome: str, ticket=None, retry_after: float | None = None) -> None:
    ticket = ticket or window.take()
    ticket.outcome, ticket.retry_after = outcome, retry_after
    window.done(ticket)


def full(window: Window) -> list:
    """Tickets taken until the window is full."""
    return [window.take() for _ in range(window.allowed - window.in_flight)]


def serve(window: Window, limit, batches: list[int], rtt: float = 1.0, retry_after: float = 5.0) -> list[tuple]:
    """``batches`` of requests sent through ``window`` (its clock a ``Clock``) to a simulated server that takes
    ``limit(answers so far)`` requests at once, answers each in ``rtt``, and refuses the others at once with
    ``retry_after``. A refused request waits that out (stretched by up to half at random), then goes before
    every request not sent yet. A batch ends when its last request is answered. Returns ``(time, batch, request
    refused before)`` of every answer, in order."""
    rng, clock = random.Random(0), window.clock
    events: list = []  # (time, order, request, its ticket; None: back from its wait)
    answers: list[tuple] = []
    refused: set[int] = set()
    busy = order = 0
    for batch, size in enumerate(batches):
        again, first = deque(), deque(range(len(answers), len(answers) + size))
        while True:
            while window.open() and (again or first):
                request = (again or first).popleft()
                window.waiting = len(again) + len(first)
                ticket, order = window.take(), order + 1
                if busy >= limit(len(answers)):
                    refused.add(request)
                    end(window, CONGESTED, ticket, retry_after)
                    heapq.heappush(events, (clock.now + retry_after * (1 + rng.random() / 2), order, request, None))
                else:
                    busy += 1
                    heapq.heappush(events, (clock.now + rtt, order, request, ticket))
            window.waiting = len(again) + len(first)
            if len(answers) == sum(batches[: batch + 1]):
                break
            clock.now, _, request, ticket = heapq.heappop(events)
            if ticket is None:
                again.append(request)
            else:
                busy -= 1
                end(window, OK, ticket)
                answers.append((clock.now, batch, request in refused))
    return answers


def test_slow_start_doubles_then_a_refusal_keeps_nine_tenths_of_what_was_in_flight():
    win = Window(64)
    for _ in range(15):
        end(win, OK)
    assert win.allowed == 16 and win.slow_start
    held = full(win)  # 16 in flight: the server took 8 and refused the others, their refusals in any order
    for ticket in reversed(held[8:]):
        end(win, CONGESTED, ticket)
    assert win.peak == 9 and win.size == pytest.approx(8.1) and win.allowed == 8 and not win.slow_start
    assert win.epoch == 1 and win.refused == 8  # one overload, one decrease: to 0.9 of the fewest refused


def test_below_the_last_refusal_it_grows_by_one_per_window_of_answers():
    win = Window(64)
    win.size, win.slow_start, win.peak = 10.0, False, 20.0
    for _ in range(10):
        end(win, OK)
    assert win.allowed == 10 and 10.9 < win.size < 11.0  # about one more after a window's worth
    win.peak = 0.0  # (no refusal known)
    held = full(win)
    end(win, CONGESTED, held[-1])  # the tenth in flight refused
    assert win.size == pytest.approx(9.0) and win.allowed == 9 and win.peak == 10


@pytest.mark.parametrize("limit", [8, 16, 40])
def test_a_server_that_holds_its_limit_is_asked_for_more_once_per_plateau(limit):
    """The window used to ask for one more than the server takes every one or two round trips (a refusal every 9
    answers at 8); now less than once per 8 round trips (``PLATEAU``: 10), with the server kept as busy."""
    win = Window(64, clock=Clock())
    answers = serve(win, lambda _: limit, [400 * limit])
    trips = answers[-1][0]  # the round trips the batch took: 400 at the least
    assert win.refused <= 400 / 8 + limit  # (the slow start's overshoot: up to the limit)
    assert trips <= 400 * 1.03 + 8  # (the slow start: log2(limit) round trips)


def test_no_request_that_waited_out_a_refusal_is_left_for_the_end_of_a_batch():
    """A refused request waits 5 round trips: asking for a refused size near the end of a batch would leave it
    last, the batch waiting on it alone. Batch after batch, the last answer is never a refused request's, and
    each batch takes its requests over the limit round trips, plus one."""
    win = Window(64, clock=Clock())
    answers = serve(win, lambda _: 8, [8 * 40] * 12)
    starts = [0.0] + [answers[i][0] for i in range(8 * 40 - 1, len(answers) - 1, 8 * 40)]
    for batch in range(1, 12):  # after the first (the slow start)
        mine = [a for a in answers if a[1] == batch]
        assert not mine[-1][2], f"batch {batch} ended on a refused request"
        assert mine[-1][0] - starts[batch] <= 40 + 1
    assert win.refused >= 10  # the limit was asked for all along


def test_a_limit_that_rises_is_found_and_one_that_falls_is_halved_at_once():
    win = Window(64, clock=Clock())
    answers = serve(win, lambda n: 8 if n < 2000 else 16 if n < 6000 else 4, [8000])
    rise, fall = answers[1999][0], answers[5999][0]
    sizes = [(t, size) for t, size in win.history]
    assert max(s for t, s in sizes if t < rise) <= 9
    assert min(t for t, s in sizes if t > rise and s >= 16) <= rise + 16  # round trips: the plateau's 10 and 6
    after = [(t - fall, s) for t, s in sizes if t >= fall]
    assert max(s for t, s in after if t >= 2) <= 8 and max(s for t, s in after if t >= 6) <= 5
    tail = [a for a in answers if a[0] > fall + 20]
    assert len(tail) >= 0.9 * 4 * (answers[-1][0] - fall - 20)  # and it keeps the server busy at 4


def test_a_lone_refusal_below_the_known_limit_keeps_it_and_a_second_one_halves():
    """A server that counts a request as in flight a moment after its answer left refuses one request at its own
    limit now and then: one refusal below the last refusal's size keeps that size as the limit known (the window
    regrows to it in one window of answers); a refusal of a request sent after it, before any such request was
    answered, says the limit fell: half."""
    win = Window(64, clock=Clock())
    win.size, win.slow_start, win.peak = 8.5, False, 9.0
    held = full(win)
    end(win, CONGESTED, held[-1])  # the eighth refused
    assert win.peak == 9 and win.size == pytest.approx(7.2)
    for ticket in held[:7]:
        end(win, OK, ticket)
    assert win.allowed == 8
    win.size = 7.5
    sent = full(win)  # requests sent after the shrink, none answered yet: the seventh refused
    end(win, CONGESTED, sent[-1])
    assert win.size == pytest.approx(3.5) and win.peak == 7  # half of it


def test_a_refusal_at_the_limit_right_after_a_shrink_halves_but_keeps_the_limit_known():
    """The server refused the ninth in flight (the window keeps 8.1), then, before any request sent since was
    answered, the eighth (it still counted an answered one): half, but the limit known stays 9, so the window
    regrows to 8 at one per window of answers and waits there, not at 7."""
    win = Window(64, clock=Clock())
    win.size, win.slow_start, win.peak = 9.0, False, 9.0
    held = full(win)
    end(win, CONGESTED, held[-1])
    assert win.peak == 9 and win.size == pytest.approx(8.1)
    end(win, OK, held[0])
    sent = win.take()  # the eighth in flight again
    end(win, CONGESTED, sent)
    assert win.size == pytest.approx(4.0) and win.peak == 9
    win.waiting, win.rtt = 10**6, 1.0
    while win.in_flight:
        end(win, OK, held[win.in_flight])  # the rest answered
    for _ in range(60):
        end(win, OK)
    assert win.allowed == 8


def test_refusals_of_requests_sent_before_a_shrink_do_not_shrink_it_again():
    win = Window(64)
    win.size, win.slow_start, win.peak = 20.0, False, 20.0
    held = full(win)  # one overload: the server takes 8, twelve requests refused
    for ticket in held[8:]:
        end(win, CONGESTED, ticket)
    assert win.size == pytest.approx(8.1) and win.refused == 12 and win.epoch == 1
    for ticket in held[:8]:
        end(win, OK, ticket)
    sent = full(win)
    end(win, OK, sent[0])  # a request sent after that shrink answered: the shrink was enough
    end(win, CONGESTED, sent[-1])  # a new overload
    assert win.epoch == 2 and win.size == pytest.approx(0.9 * sent[-1].load)


@pytest.mark.parametrize("waiting, grows", [(10, False), (100, True)])
def test_a_refused_size_is_not_asked_for_when_the_batch_would_end_before_a_refused_request_came_back(
        waiting, grows):
    """A refusal with Retry-After 5 (waited 7.5 s at the most), answers in 1 s: at 8 in flight, 10 requests
    waiting are all sent within 2 round trips; 100 need 12."""
    clock = Clock()
    win = Window(64, clock=clock)
    win.size, win.slow_start, win.peak = 8.0, False, 9.0
    end(win, CONGESTED, win.take(), retry_after=5.0)  # (a request of an older overload: it sets the wait only)
    win.size, win.epoch, win.peak = 8.999, 1, 9.0
    ticket = win.take()
    clock.now = 1.0
    win.waiting = waiting
    end(win, OK, ticket)
    assert win.allowed == (9 if grows else 8)


def test_the_ceiling_holds_and_other_failures_leave_the_window_alone():
    win = Window(4)
    for _ in range(50):
        end(win, OK)
    assert win.allowed == 4 and win.size == 4.0
    end(win, NEUTRAL)  # a 500, a connection error: no word on the load
    assert win.size == 4.0 and win.refused == 0 and win.in_flight == 0


def test_a_server_that_never_refuses_gets_the_ceiling():
    win = Window(64, clock=Clock())
    answers = serve(win, lambda _: 10**6, [5000])
    assert win.allowed == 64 and win.refused == 0 and answers[-1][0] <= 5000 / 64 + 8


def test_the_window_never_goes_below_one():
    win = Window(8)
    for _ in range(20):
        end(win, CONGESTED)
    assert win.allowed == 1 and win.open()


def test_history_keeps_each_change_of_size_with_its_time():
    clock = iter(float(t) for t in range(10_000))
    win = Window(64, clock=lambda: next(clock))
    for _ in range(3):
        end(win, OK)
    end(win, CONGESTED, full(win)[-1])  # the fourth in flight refused
    assert [p[1] for p in win.history] == [1, 2, 3, 4, 3]
    assert [p[0] for p in win.history] == sorted(p[0] for p in win.history)
    summary = win.summary()
    assert summary["ceiling"] == 64 and summary["window"] == 3 and summary["refused"] == 1
    assert summary["answered"] == 3


def test_a_long_history_is_thinned_not_grown_without_bound(monkeypatch):
    monkeypatch.setattr(w, "HISTORY_POINTS", 50)
    win = Window(64)
    win.slow_start = False
    for i in range(1000):
        end(win, OK if i % 2 else CONGESTED)
        win.epoch += 1  # every refusal a new overload
        win.size = 5.0 if i % 2 else 2.0
        win._note()
    assert len(win.history) <= 50 and win.history[0][1] == 1


def test_slots_never_let_more_through_than_the_window_allows():
    win = Window(64)
    seen = {"most": 0, "now": 0}

    async def one(slots: Slots, i: int) -> None:
        async with slots.held() as ticket:
            seen["now"] += 1
            seen["most"] = max(seen["most"], seen["now"])
            assert seen["now"] <= win.allowed
            await asyncio.sleep(0.001)
            seen["now"] -= 1
            ticket.outcome = CONGESTED if i % 7 == 3 else OK

    async def main() -> None:
        slots = Slots(win)
        await asyncio.gather(*(one(slots, i) for i in range(300)))

    asyncio.run(main())
    assert win.in_flight == 0 and seen["most"] >= 2 and win.answered + win.refused == 300 and win.waiting == 0


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_request_sent_again_gets_the_next_place_before_first_tries():
    order: list[str] = []

    async def main() -> None:
        slots, release = Slots(Window(8, initial=1)), asyncio.Event()

        async def one(name: str, again: bool = False) -> None:
            async with slots.held(again=again) as ticket:
                order.append(name)
                if name == "holder":
                    await release.wait()
                ticket.outcome = OK

        tasks = [asyncio.create_task(one("holder"))]
        await _settle()
        tasks += [asyncio.create_task(one(name)) for name in ("a", "b")]
        await _settle()
        tasks.append(asyncio.create_task(one("refused before", again=True)))
        await _settle()
        assert slots.window.waiting == 3
        slots.window.size = 1.0  # one at a time: the order is the order places are given
        release.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert order == ["holder", "refused before", "a", "b"]


def test_a_cancelled_wait_gives_no_place_away_and_closing_refuses_those_waiting():
    async def main() -> None:
        win = Window(1)
        slots, release = Slots(win), asyncio.Event()
        got: list[str] = []

        async def one(name: str) -> None:
            async with slots.held() as ticket:
                got.append(name)
                if name == "holder":
                    await release.wait()
                ticket.outcome = OK

        holder = asyncio.create_task(one("holder"))
        await _settle()
        gone, kept = asyncio.create_task(one("gone")), asyncio.create_task(one("kept"))
        await _settle()
        gone.cancel()
        await _settle()
        assert win.waiting == 1
        release.set()
        await asyncio.gather(holder, kept, gone, return_exceptions=True)
        assert got == ["holder", "kept"] and win.in_flight == 0 and win.waiting == 0

        release.clear()
        holder = asyncio.create_task(one("holder"))
        await _settle()
        late = asyncio.create_task(one("late"))
        await _settle()
        await slots.close()
        with pytest.raises(Closed):
            await late
        with pytest.raises(Closed):
            async with slots.held():
                pass
        release.set()
        await holder
        assert win.in_flight == 0 and win.waiting == 0

    asyncio.run(main())


def test_past_the_last_refusal_it_grows_faster_each_round_trip():
    """A server that starts taking 16 where it took 8: once the window has taken the refused size again, it grows
    by its distance to that size per window of answers, so it reaches 16 in a few windows of answers, not eight."""
    win = Window(64, clock=Clock())
    win.size, win.slow_start, win.peak = 9.0, False, 9.0  # the size refused before, taken this time
    win.waiting, win.rtt = 10**6, 1.0  # a long batch ahead
    answers = 0
    while win.allowed < 16:
        end(win, OK)
        answers += 1
    assert answers < 60  # one more per window of answers would take 9 + 10 + ... + 15 = 84
    win.size = 9.5  # near the last refusal: one more per window of answers
    before = win.size
    end(win, OK)
    assert abs(win.size - before - 1.0 / before) < 1e-9


def test_a_clock_that_jumps_back_and_ahead_neither_breaks_nor_stalls_the_window():
    """The wall clock set back an hour, then ahead a day, while requests are out: a round trip is never negative,
    the window still doubles in slow start, keeps its ceiling and ends with nothing in flight."""
    clock = Clock()
    win = Window(16, clock=clock)
    for jump in (-3600.0, 86_400.0, -86_400.0, 0.5):
        tickets = full(win)
        clock.now += jump
        for ticket in tickets:
            end(win, OK, ticket)
        assert win.rtt >= 0
    assert win.allowed == 16 and win.in_flight == 0 and win.answered == 1 + 2 + 4 + 8
    assert [p[1] for p in win.history] == list(range(1, 17))  # each change kept, whatever its time


def test_thousands_of_waiters_are_each_woken_once():
    """5000 requests through a window of 4, a third of them cancelled while they wait: every other one gets one
    place, and the places handed out are counted, not timed (no waiter is looked at again and again)."""
    win = Window(4, initial=4)
    looks = {"open": 0}
    is_open = win.open

    def counted() -> bool:
        looks["open"] += 1
        return is_open()

    win.open = counted
    served: list[int] = []

    async def main() -> None:
        slots = Slots(win)

        async def one(i: int) -> None:
            async with slots.held() as ticket:
                await asyncio.sleep(0)
                served.append(i)
                ticket.outcome = OK

        tasks = [asyncio.create_task(one(i)) for i in range(5000)]
        await _settle()
        for task in tasks[10::3]:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    assert sorted(served) == [i for i in range(5000) if i < 10 or (i - 10) % 3] and win.in_flight == win.waiting == 0
    assert looks["open"] < 4 * 5000


def test_a_step_of_the_wall_clock_stretches_no_round_trip(monkeypatch):
    """Round trips are timed on the monotonic clock: the wall clock set an hour forward while a request is out
    (NTP, a suspended machine) used to count an hour-long round trip. The history stays in epoch seconds."""
    now = {"wall": 1_000_000.0, "steady": 50.0}
    monkeypatch.setattr(w, "time", type("T", (), {"time": staticmethod(lambda: now["wall"]),
                                                  "monotonic": staticmethod(lambda: now["steady"])}))
    win = Window(64)
    ticket = win.take()
    now["wall"] += 3600.0 + 0.2  # the wall clock jumps an hour; 0.2 s really pass
    now["steady"] += 0.2
    end(win, OK, ticket)
    assert win.rtt == pytest.approx(0.2)
    assert win.history[0][0] == pytest.approx(1_000_000.0) and win.history[-1][0] == pytest.approx(1_000_000.2)
