"""The adaptive request window: slow start, additive increase, one multiplicative decrease per overload, the
ceiling, its history, and the async slots that never let more requests through than it allows."""

from __future__ import annotations

import asyncio

from bonforge.llm import window as w
from bonforge.llm.window import CONGESTED, NEUTRAL, OK, Slots, Window


def end(window: Window, outcome: str, ticket=None) -> None:
    ticket = ticket or window.take()
    ticket.outcome = outcome
    window.done(ticket)


def test_slow_start_doubles_then_a_refusal_halves_it():
    win = Window(64)
    for _ in range(15):
        end(win, OK)
    assert win.allowed == 16 and win.slow_start
    end(win, CONGESTED)
    assert win.allowed == 8 and not win.slow_start


def test_additive_increase_is_one_per_window_of_answers_and_a_refusal_keeps_nine_tenths():
    win = Window(64)
    win.size, win.slow_start, win.peak = 10.0, False, 10.0  # at the last refusal's size
    for _ in range(10):
        end(win, OK)
    assert win.allowed == 10 and 10.9 < win.size < 11.0  # about one more after a window's worth
    before = win.size
    end(win, CONGESTED)
    assert win.size == before * 0.9 and win.allowed == 9


def test_refusals_of_requests_sent_before_a_shrink_do_not_shrink_it_again():
    win = Window(64)
    win.size, win.slow_start = 20.0, False
    sent = [win.take() for _ in range(12)]  # one overload: twelve requests out, all refused
    for ticket in sent:
        end(win, CONGESTED, ticket)
    assert win.size == 18.0 and win.refused == 12
    end(win, CONGESTED)  # a request sent after that shrink: a new overload
    assert win.size == 18.0 * 0.9


def test_the_ceiling_holds_and_other_failures_leave_the_window_alone():
    win = Window(4)
    for _ in range(50):
        end(win, OK)
    assert win.allowed == 4 and win.size == 4.0
    end(win, NEUTRAL)  # a 500, a connection error: no word on the load
    assert win.size == 4.0 and win.refused == 0 and win.in_flight == 0


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
    end(win, CONGESTED)
    assert [p[1] for p in win.history] == [1, 2, 3, 4, 2]
    assert [p[0] for p in win.history] == sorted(p[0] for p in win.history)
    summary = win.summary()
    assert summary["ceiling"] == 64 and summary["window"] == 2 and summary["refused"] == 1
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
    assert win.in_flight == 0 and seen["most"] >= 2 and win.answered + win.refused == 300


def test_past_the_last_refusal_it_grows_faster_each_round_trip():
    """A server that starts taking 16 where it took 8: from the last refusal's size on the window grows by its
    distance to it per window of answers, so it reaches 16 in a few windows of answers, not eight."""
    win = Window(64)
    win.size, win.slow_start = 9.0, False
    end(win, CONGESTED)  # the old limit: peak 9, size 8.1
    answers = 0
    while win.allowed < 16:
        end(win, OK)
        answers += 1
    assert answers < 60  # one more per window of answers would take 8 + 9 + ... + 15 = 92
    win.size = 9.5  # near the last refusal: one more per window of answers, as before
    before = win.size
    end(win, OK)
    assert abs(win.size - before - 1.0 / before) < 1e-9
