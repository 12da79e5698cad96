"""The openai engine against a real local HTTP server: retries, 429 + Retry-After, 5xx, timeouts,
the concurrency bound, the rate limit and malformed responses."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from llm_server import LimitedServer, ScriptedServer

from bonforge.errors import TransientError
from bonforge.llm.base import EngineError, Request, Unfinished, UnfinishedForNow
from bonforge.llm.config import OpenAITeacher
from bonforge.llm.openai import OpenAIEngine


def teacher(url: str, **kw) -> OpenAITeacher:
    base = dict(engine="openai", name="t", model="served-model", base_url=url, n=2, max_tokens=32,
                api_key_env="BONFORGE_TEST_KEY", max_retries=3)
    return OpenAITeacher(**{**base, **kw})


def chat(i: int, n: int = 2, seed: int = 100) -> Request:
    return Request(id=f"p{i}", messages=({"role": "user", "content": f"question {i}"},), n=n, temperature=0.5,
                   top_p=0.9, max_tokens=32, seed=seed)


def test_samples_use_seed_plus_index_and_split_reasoning(monkeypatch):
    monkeypatch.setenv("BONFORGE_TEST_KEY", "sk-test")
    with ScriptedServer() as server:
        out = OpenAIEngine(teacher(server.url)).generate([chat(0, n=3), chat(1, n=1, seed=7)])
    assert [[c.index for c in cs] for cs in out] == [[0, 1, 2], [0]]
    assert [c.seed for c in out[0]] == [100, 101, 102] and out[1][0].seed == 7
    sent = sorted((b["messages"][0]["content"], b["seed"]) for b in server.bodies)
    assert sent == [("question 0", 100), ("question 0", 101), ("question 0", 102), ("question 1", 7)]
    body = server.bodies[0]
    assert body["path"] == "/v1/chat/completions" and body["n"] == 1 and body["model"] == "served-model"
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.5, 0.9, 32)
    c = out[0][1]
    assert c.reasoning == "seed 101" and c.text.startswith("The answer is")
    assert (c.finish_reason, c.completion_tokens, c.engine, c.model) == ("stop", 7, "openai", "served-model")
    assert c.prompt_tokens > 0 and c.latency_s > 0


def test_raw_prompt_uses_completions_endpoint():
    with ScriptedServer() as server:
        out = OpenAIEngine(teacher(server.url)).generate([Request(id="r", prompt="2+2=", max_tokens=5, seed=3)])
    assert server.bodies[0]["path"] == "/v1/completions" and server.bodies[0]["prompt"] == "2+2="
    assert out[0][0].finish_reason == "length" and out[0][0].reasoning == "seed 3"


def test_retries_5xx_and_429_with_retry_after():
    replies = {0: (503, {}, {"error": "overloaded"}), 1: (429, {"Retry-After": "0.3"}, {"error": "slow down"}),
               2: (500, {}, b"not json either")}
    with ScriptedServer(lambda n, body: replies.get(n, (200, {}, None))) as server:
        t0 = time.perf_counter()
        out = OpenAIEngine(teacher(server.url, max_concurrency=1)).generate([chat(0, n=1)])
        elapsed = time.perf_counter() - t0
    assert server.count == 4 and out[0][0].text.startswith("The answer")
    assert elapsed >= 0.3  # the Retry-After hint was waited out


@pytest.mark.parametrize("hint", ["Mon, 01 Jan 99999999999 00:00:00 GMT", "1e400", "-5", "nan", "soon", "3" * 5000])
def test_a_hostile_retry_after_is_ignored_and_the_sample_retried(hint):
    """A date past what a datetime holds raised OverflowError out of the batch (every answer lost, a traceback);
    the control: the other hostile hints, ignored (backoff instead)."""
    from bonforge.llm.openai import retry_after_seconds

    assert retry_after_seconds(hint) in (None, 0.0)
    with ScriptedServer(lambda n, body: (429, {"Retry-After": hint}, {"error": "busy"}) if n == 0 else
                        (200, {}, None)) as server:
        out = OpenAIEngine(teacher(server.url, max_concurrency=1)).generate([chat(0, n=2)])
    assert server.count == 3 and [c.index for c in out[0]] == [0, 1]


def test_gives_up_after_max_retries_with_a_transient_error():
    with ScriptedServer(lambda n, body: (502, {"Retry-After": "0"}, {"error": "bad gateway"})) as server:
        with pytest.raises(TransientError, match=r"request p0 sample 0: HTTP 502"):
            OpenAIEngine(teacher(server.url, max_retries=2)).generate([chat(0, n=1)])
    assert server.count == 3


def test_timeout_is_retried():
    slow = {0}
    with ScriptedServer(lambda n, body: (200, {}, None)) as server:
        server.script = lambda n, body: (time.sleep(1.0) if n in slow else None) or (200, {}, None)
        out = OpenAIEngine(teacher(server.url, timeout_s=0.3)).generate([chat(0, n=1)])
    assert server.count == 2 and out[0][0].index == 0


def test_client_error_is_not_retried():
    with ScriptedServer(lambda n, body: (400, {}, {"error": {"message": "model not found"}})) as server:
        with pytest.raises(EngineError, match=r"request p0 sample 0: HTTP 400 .*model not found"):
            OpenAIEngine(teacher(server.url)).generate([chat(0, n=1)])
    assert server.count == 1


@pytest.mark.parametrize("error", [
    {"message": "This model's maximum context length is 2048 tokens. However, you requested 5000 tokens.",
     "type": "BadRequestError", "code": 400},
    {"message": "Input too long.", "type": "invalid_request_error", "code": "context_length_exceeded"},
])
def test_a_prompt_over_the_server_window_is_skipped_and_reported(error, caplog):
    def script(n, body):
        too_long = body["messages"][0]["content"] == "question 1"
        return (400, {}, {"error": error}) if too_long else (200, {}, None)

    with ScriptedServer(script) as server, caplog.at_level("WARNING", logger="bonforge"):
        out = OpenAIEngine(teacher(server.url, max_retries=0)).generate([chat(0), chat(1), chat(2)])
    assert [len(cs) for cs in out] == [2, 0, 2] and server.count == 6  # not retried, the others kept
    assert "request p1 skipped: the server says it does not fit the model window" in caplog.text


@pytest.mark.parametrize("payload, field", [
    ({"choices": []}, "choices[0]"),
    ({"choices": [{"message": {"role": "assistant"}, "finish_reason": "stop"}]}, "choices[0].message.content"),
    ({"choices": [{"message": {"content": 5}, "finish_reason": "stop"}]}, "choices[0].message.content"),
    (b"<html>oops</html>", "not JSON"),
])
def test_malformed_response_names_request_and_field(payload, field):
    with ScriptedServer(lambda n, body: (200, {}, payload)) as server:
        escaped = field.replace("[", r"\[").replace("]", r"\]")
        with pytest.raises(EngineError, match=r"request p0 sample 0: .*" + escaped):
            OpenAIEngine(teacher(server.url)).generate([chat(0, n=1)])
    assert server.count == 1


USAGE = {  # usage as a server reports it -> (prompt, completion, cached) as counted; None: unknown
    "missing": (None, (None, None, 0)),
    "not a mapping": ("lots", (None, None, 0)),
    "honest": ({"prompt_tokens": 3, "completion_tokens": 7}, (3, 7, 0)),
    "cached": ({"prompt_tokens": 20, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 15}},
               (20, 7, 15)),
    "cached past the prompt": ({"prompt_tokens": 3, "completion_tokens": 7,
                                "prompt_tokens_details": {"cached_tokens": 9}}, (3, 7, 0)),
    "negative": ({"prompt_tokens": -3, "completion_tokens": -7}, (None, None, 0)),
    "as strings": ({"prompt_tokens": "3", "completion_tokens": "7"}, (None, None, 0)),
    "floats and bools": ({"prompt_tokens": 3.0, "completion_tokens": True}, (None, None, 0)),
    "past 32 bits": ({"prompt_tokens": 2**40, "completion_tokens": 7}, (None, 7, 0)),
    "past max_tokens": ({"prompt_tokens": 3, "completion_tokens": 33}, (3, None, 0)),
    "past what the prompt holds": ({"prompt_tokens": 10**6, "completion_tokens": 7}, (None, 7, 0)),
    "none for a text": ({"prompt_tokens": 0, "completion_tokens": 0}, (None, None, 0)),  # was (0, 0): free
    "one for a page": ({"prompt_tokens": 3, "completion_tokens": 1}, (3, None, 0), "x" * 3000),  # was 1
    "the fewest a page can be": ({"prompt_tokens": 3, "completion_tokens": 12}, (3, 12, 0), "x" * 3000),
}


@pytest.mark.parametrize("case", USAGE)
def test_usage_the_client_cannot_trust_is_an_unknown_count_and_the_answer_is_kept(case):
    usage, counted, text = (*USAGE[case], "hi")[:3]

    def script(n, body):
        reply = {"choices": [{"message": {"content": text}, "finish_reason": "stop"}]}
        return 200, {}, reply if usage is None else {**reply, "usage": usage}

    with ScriptedServer(script) as server:
        [[c]] = OpenAIEngine(teacher(server.url)).generate([chat(0, n=1)])
    assert c.text == text and (c.prompt_tokens, c.completion_tokens, c.cached_tokens) == counted


def test_concurrency_is_bounded_and_used():
    with ScriptedServer(delay_s=0.05) as server:
        out = OpenAIEngine(teacher(server.url, max_concurrency=4, start_concurrency=4)).generate(
            [chat(i, n=4) for i in range(10)])  # the window starts at its ceiling: the bound, not slow start
    assert sum(len(cs) for cs in out) == 40 == server.count
    assert server.max_in_flight == 4  # the bound is reached, never passed


def test_requests_per_minute_spaces_starts():
    with ScriptedServer() as server:
        t0 = time.perf_counter()
        OpenAIEngine(teacher(server.url, requests_per_minute=600)).generate([chat(0, n=4)])
        elapsed = time.perf_counter() - t0
    assert elapsed >= 0.3  # 4 starts, 0.1 s apart


def test_api_key_from_env_is_sent(monkeypatch):
    monkeypatch.setenv("BONFORGE_TEST_KEY", "sk-secret")
    with ScriptedServer() as server:
        OpenAIEngine(teacher(server.url)).generate([chat(0, n=1)])
    monkeypatch.delenv("BONFORGE_TEST_KEY")
    with ScriptedServer() as keyless:
        OpenAIEngine(teacher(keyless.url)).generate([chat(0, n=1)])
    assert server.auth == ["Bearer sk-secret"] and keyless.auth == [None]


def test_engine_works_inside_a_running_event_loop():
    import asyncio

    async def main():
        with ScriptedServer() as server:
            return OpenAIEngine(teacher(server.url)).generate([chat(0, n=2)])

    out = asyncio.run(main())
    assert len(out[0]) == 2


def test_progress_counts_the_samples_as_they_finish():
    """``progress`` hears of each sample as it comes back, not once the batch is done."""
    heard: list[tuple[int, int]] = []
    with ScriptedServer(delay_s=0.02) as server:
        engine = OpenAIEngine(teacher(server.url, max_concurrency=2))
        engine.generate([chat(i, n=3) for i in range(4)], lambda k: heard.append((k, server.count)))
    assert [k for k, _ in heard] == list(range(1, 13))
    assert heard[0][1] < 12  # the first sample was counted while others were still to be asked


def test_a_server_that_takes_8_then_16_at_once_serves_every_sample_once():
    """max_concurrency 64 against a server that refuses (429, Retry-After: 0, so a refused request waits 0.5 to
    0.75 s) past 8 in flight, then past 16: every sample comes back, none is asked again after its answer, and the
    window found both limits (it ends at the second: the first refusal took it to about 8)."""
    with LimitedServer(8, delay_s=0.1, retry_after="0", at_answers={128: 16}) as server:
        engine = OpenAIEngine(teacher(server.url, max_concurrency=64, max_retries=6))
        out = engine.generate([chat(i, n=8) for i in range(64)])
    assert sum(len(cs) for cs in out) == 512 == server.answered  # each answer asked for once, none lost
    assert server.count == 512 + server.refused and server.refused < 64
    assert engine.window.allowed >= 15 and engine.window.refused == server.refused


def test_a_sample_refused_past_its_retries_fails_alone():
    """One sample is refused on every try; the others (a slow one among them, still in flight when it gave
    up) are all kept, in the error that says which sample failed and why."""
    def script(n, body):
        if body["messages"][0]["content"] == "question 1" and body["seed"] == 101:
            return 429, {"Retry-After": "0"}, {"error": "busy"}
        if body["messages"][0]["content"] == "question 2":
            time.sleep(1.0)  # answers trickling in after the stubborn one gave up
        return 200, {}, None

    with ScriptedServer(script) as server:
        with pytest.raises(UnfinishedForNow, match=r"1 of 9 samples failed \(HTTP 429: 1\); the first: request p1 "
                                                   r"sample 1: HTTP 429") as e:
            OpenAIEngine(teacher(server.url, max_retries=2)).generate([chat(i, n=3) for i in range(3)])
    assert [[c.index for c in cs] for cs in e.value.results] == [[0, 1, 2], [0, 2], [0, 1, 2]]
    assert e.value.failed == [("p1", 1, "HTTP 429")] and server.count == 8 + 3


def test_a_server_that_refuses_everything_ends_with_every_sample_failed():
    with ScriptedServer(lambda n, body: (429, {"Retry-After": "0"}, {"error": "busy"})) as server:
        engine = OpenAIEngine(teacher(server.url, max_retries=1, max_concurrency=16))
        with pytest.raises(UnfinishedForNow, match=r"6 of 6 samples failed \(HTTP 429: 6\)") as e:
            engine.generate([chat(i, n=2) for i in range(3)])
    assert e.value.results == [[], [], []] and server.count == 6 * 2  # each sample its two tries, no more
    assert engine.window.allowed == 1  # shrunk to one request at a time


def test_a_503_storm_shrinks_the_window_and_every_sample_comes_back():
    with ScriptedServer(lambda n, body: (503, {}, {"error": "overloaded"}) if 10 <= n < 40 else (200, {}, None),
                        delay_s=0.01) as server:
        engine = OpenAIEngine(teacher(server.url, max_retries=8, max_concurrency=32))
        out = engine.generate([chat(i, n=4) for i in range(10)])
    assert sum(len(cs) for cs in out) == 40 and server.count == 70
    assert engine.window.refused == 30


def test_a_malformed_answer_stops_the_batch_and_keeps_what_came_before():
    """A failure a retry cannot fix (here a malformed answer to the last sample) is not transient: the samples
    not asked yet are not asked, and every answer received comes back in the error."""
    def script(n, body):
        return (200, {}, {"choices": []}) if body["seed"] == 8 else (200, {}, None)

    with ScriptedServer(script) as server:
        with pytest.raises(Unfinished, match=r"1 of 4 samples failed \(malformed response, no field 'choices\[0\]': "
                                             r"1\)") as e:
            OpenAIEngine(teacher(server.url)).generate([chat(0), chat(1, seed=7)])
    assert not isinstance(e.value, TransientError) and [len(cs) for cs in e.value.results] == [2, 1]
    assert server.count == 4


def test_a_client_error_leaves_the_samples_not_asked_yet_unasked():
    with ScriptedServer(lambda n, body: (401, {}, {"error": "bad key"})) as server:
        with pytest.raises(Unfinished, match=r"12 of 12 samples failed \(not asked: the batch stopped at a failure: "
                                             r"11, HTTP 401 .*bad key.*: 1\)") as e:
            OpenAIEngine(teacher(server.url, max_concurrency=8)).generate([chat(i, n=4) for i in range(3)])
    assert server.count == 1 and e.value.results == [[], [], []]


def test_an_answer_in_flight_when_the_batch_stops_is_received_and_kept():
    def script(n, body):
        if body["seed"] == 101:
            time.sleep(1.0)  # still in flight when the client error below stops the batch
        return (400, {}, {"error": "bad request"}) if body["seed"] == 7 else (200, {}, None)

    with ScriptedServer(script) as server:
        with pytest.raises(Unfinished, match=r"4 of 6 samples failed \(not asked: the batch stopped at a failure: 3, "
                                             r"HTTP 400 .*\); the first: request p1 sample 0: HTTP 400") as e:
            OpenAIEngine(teacher(server.url)).generate([chat(0), chat(1, seed=7), chat(2, seed=20)])
    assert [[c.index for c in cs] for cs in e.value.results] == [[0, 1], [], []] and server.count == 3


def test_a_lone_surrogate_in_a_reply_is_stored_as_valid_text():
    """A reply whose JSON escapes half a surrogate pair in its text or reasoning (no Arrow column holds that)
    reads as U+FFFD; a whole pair (an emoji) stays as it is."""
    body = (b'{"choices": [{"message": {"content": "A: \\ud800 \\ud83d\\ude00", "reasoning_content": "\\udfff"},'
            b' "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}')
    with ScriptedServer(lambda n, b: (200, {}, body)) as server:
        got = OpenAIEngine(teacher(server.url)).generate([chat(0, n=1)])[0][0]
    assert got.text == "A: \ufffd \U0001f600" and got.reasoning == "\ufffd"
    assert pa.array([got.text, got.reasoning]).to_pylist() == [got.text, got.reasoning]


def test_a_server_whose_limit_falls_to_one_then_to_none_ends_with_the_rest_failed():
    """Limit 4, then 1 after 10 answers, then 0 after 20 (every request refused, Retry-After: 0): the batch ends,
    its 20 answers kept and the others failed past their retries; nothing is left in the window."""
    with LimitedServer(4, delay_s=0.02, retry_after="0", at_answers={10: 1, 20: 0}) as server:
        engine = OpenAIEngine(teacher(server.url, max_concurrency=16, max_retries=2))
        with pytest.raises(UnfinishedForNow, match=r"of 40 samples failed \(HTTP 429: \d+\)") as e:
            engine.generate([chat(i, n=4) for i in range(10)])
    assert 10 <= sum(map(len, e.value.results)) == server.answered <= 20
    assert engine.window.allowed == 1 and engine.window.in_flight == engine.window.waiting == 0


def test_a_stream_closed_while_requests_wait_leaves_the_next_batch_every_place():
    """A stream closed with 38 samples waiting for the window (2 places, a start window of 8 above that ceiling)
    and 2 out: none of the 38 is sent, the window holds nothing, and the next batch on the same engine gets both
    places."""
    import queue

    def script(n, body):
        if n < 2:
            time.sleep(3.0)  # still out when the stream closes
        return 200, {}, None

    with ScriptedServer(script) as server:
        engine = OpenAIEngine(teacher(server.url, max_concurrency=2, start_concurrency=8, max_retries=1))
        stream = engine.stream(queue.Queue())
        stream.put([chat(i) for i in range(20)])
        for _ in range(100):
            if engine.window.waiting == 38:
                break
            time.sleep(0.05)
        assert engine.window.in_flight == 2 and engine.window.waiting == 38
        stream.close()
        assert engine.window.in_flight == engine.window.waiting == 0 and server.count == 2
        out = engine.generate([chat(i) for i in range(4)])
    assert sum(map(len, out)) == 8 and server.count == 10 and engine.window.allowed == 2
