"""The engine interface helpers: requests, reasoning split, stop strings, the retry helper, errors."""

from __future__ import annotations

import asyncio
import pickle
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bonforge.errors import TransientError
from bonforge.llm.base import (EngineError, Request, RetryableError, retry_async, retry_delay, split_reasoning,
                               truncate_at_stop)
from bonforge.llm.openai import retry_after_seconds


def test_request_needs_exactly_one_of_messages_or_prompt():
    with pytest.raises(ValueError, match="request r1: give exactly one of messages or prompt"):
        Request(id="r1")
    with pytest.raises(ValueError, match="request r2"):
        Request(id="r2", prompt="a", messages=({"role": "user", "content": "a"},))
    assert Request(id="r", prompt="a", seed=5).sample_seed(3) == 8


@pytest.mark.parametrize("text, expected", [
    ("<think>plan</think>\n\nAnswer 4", ("plan", "Answer 4")),
    ("plan only closed</think>Answer", ("plan only closed", "Answer")),  # opening tag was in the prompt
    ("<think>cut off by max_tokens", ("cut off by max_tokens", "")),
    ("no thinking here", (None, "no thinking here")),
    ("says <think> mid-text", (None, "says <think> mid-text")),
])
def test_split_reasoning(text, expected):
    assert split_reasoning(text) == expected


@given(st.text(alphabet="ab<>/think ", max_size=40), st.text(alphabet="ab ", max_size=20))
def test_split_reasoning_keeps_the_final_answer(reasoning, final):
    got_reasoning, got_final = split_reasoning(f"<think>{reasoning}</think>{final}")
    if "</think>" not in reasoning:
        assert got_final == final.strip()


def test_truncate_at_stop_takes_the_earliest():
    assert truncate_at_stop("abc###def<end>", ("<end>", "###")) == ("abc", "###")
    assert truncate_at_stop("abc", ("x",)) == ("abc", None)
    assert truncate_at_stop("abc", ()) == ("abc", None)


def test_errors_pickle_and_keep_their_kind():
    e = pickle.loads(pickle.dumps(RetryableError("request p sample 0: HTTP 429", 2.5)))
    assert isinstance(e, TransientError) and e.retry_after == 2.5 and "HTTP 429" in str(e)
    f = pickle.loads(pickle.dumps(EngineError("request p: malformed")))
    assert not isinstance(f, TransientError) and str(f) == "request p: malformed"


def test_retry_async_retries_transient_only():
    calls = []

    async def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RetryableError("busy", retry_after=0.0)
        return "ok"

    assert asyncio.run(retry_async(flaky, attempts=3)) == "ok" and len(calls) == 3

    async def broken():
        calls.append(1)
        raise EngineError("bad")

    calls.clear()
    with pytest.raises(EngineError):
        asyncio.run(retry_async(broken, attempts=5))
    assert len(calls) == 1


def test_retry_after_header_forms():
    assert retry_after_seconds("3") == 3.0 and retry_after_seconds("0.5") == 0.5
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a past date: no wait


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "soon", "Wed, 99 Foo 2015", "0x10", " "])
def test_a_garbage_retry_after_is_no_hint(value):
    assert retry_after_seconds(value) is None


def test_a_negative_retry_after_waits_nothing_of_its_own():
    assert retry_after_seconds("-5") == 0.0


def test_retry_waits_honour_the_hint_never_undercut_the_backoff_and_are_capped():
    random.seed(0)
    lying = [retry_delay(3, 0.0) for _ in range(200)]  # "Retry-After: 0" on the third refusal
    assert min(lying) >= 2.0 and max(lying) <= 3.0  # the backoff (0.5 * 2 ** 2), stretched by up to half
    told = [retry_delay(1, 1.0) for _ in range(200)]
    assert min(told) >= 1.0 and max(told) <= 1.5 and len({round(d, 3) for d in told}) > 100  # spread, not a wave
    huge = [retry_delay(1, 86400.0, max_delay=30.0) for _ in range(200)]
    assert min(huge) >= 30.0 and max(huge) <= 45.0


def test_a_retry_after_over_the_cap_is_said_once_per_batch(caplog):
    async def refused():
        raise RetryableError("HTTP 429", retry_after=86400.0)

    async def batch():
        said: set[str] = set()
        for _ in range(3):
            with pytest.raises(RetryableError):
                await retry_async(refused, attempts=2, max_delay=0.01, said=said)

    with caplog.at_level("WARNING", logger="bonforge"):
        asyncio.run(batch())
    capped = [r for r in caplog.records if "asks to wait 86400 s; bonforge waits 0 s at most" in r.getMessage()]
    assert len(capped) == 1


def test_an_unfinished_batch_pickles_with_what_it_received_and_its_kind():
    from bonforge.llm.base import Completion, Unfinished, UnfinishedForNow, unfinished

    got = Completion("p0", 0, "text", None, "stop", 3, 7, 100, "openai", "m")
    e = pickle.loads(pickle.dumps(unfinished([[got], []], [("p1", 0, "HTTP 429", True)], 2)))
    assert isinstance(e, UnfinishedForNow) and isinstance(e, TransientError) and e.results == [[got], []]
    assert e.why == {"HTTP 429": 1} and str(e).startswith("1 of 2 samples failed (HTTP 429: 1)")
    f = unfinished([[], []], [("p0", 0, "HTTP 429", True), ("p1", 0, "HTTP 401", False)], 2)
    assert type(f) is Unfinished and not isinstance(f, TransientError)
