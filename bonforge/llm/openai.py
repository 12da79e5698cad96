"""The `openai` engine: any OpenAI-compatible server (vLLM serve, SGLang, hosted APIs) over async HTTP.

Each sample is its own request with its own seed (``n=1``, ``seed + index``), so a sample can be asked for
again alone. The requests in flight follow an adaptive window (``bonforge.llm.window``) under
``max_concurrency``, request starts can be rate limited, and 429/5xx/timeouts are retried with exponential
backoff and jitter that honours ``Retry-After`` (capped). A sample that still fails fails alone: the batch
goes on, and ends by raising ``Unfinished`` with every completion received. A request the server rejects
because the prompt does not fit its context window gets no completions and is reported, as in the other
engines.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import email.utils
import itertools
import logging
import math
import os
import threading
import time
from typing import Any, Awaitable, TypeVar

import httpx

from bonforge.llm.base import (Completion, EngineError, Progress, Request, RetryableError, least_tokens,
                               retry_async, split_reasoning, unfinished, valid_text)
from bonforge.llm.budget import Bill
from bonforge.llm.config import OpenAITeacher
from bonforge.llm.window import CONGESTED, NEUTRAL, OK, Closed, Slots, Window

T = TypeVar("T")
_RETRY_STATUS = {408, 409, 425, 429}
_CONGESTED_STATUS = {429, 503}  # the server says "too many": the window shrinks
# A request that failed with one of these never reached the server (a budget counts it at nothing; any other
# transport error, a read time-out above all, may have been billed: its worst case)
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol,
             httpx.LocalProtocolError, httpx.ProxyError)
log = logging.getLogger("bonforge")


def too_long(status: int, body: str) -> bool:
    """Whether an error response says the prompt (+ max_tokens) exceeds the model's context window: OpenAI's
    ``context_length_exceeded`` code, or vLLM's / SGLang's "maximum context length" message."""
    return status == 400 and ("context_length_exceeded" in body or "maximum context length" in body.lower())


def run_sync(coro: Awaitable[T]) -> T:
    """Run a coroutine to completion from sync code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header (seconds or an HTTP date) as seconds from now; None for anything else (not a
    finite number, a date that does not parse)."""
    if not value:
        return None
    try:
        seconds = float(value)
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):  # a year past what a date holds overflows
        return None
    return max(when.timestamp() - time.time(), 0.0)


class _StartLimiter:
    """Spaces request starts at least ``60 / per_minute`` seconds apart."""

    def __init__(self, per_minute: float):
        self.interval = 60.0 / per_minute
        self.next = 0.0
        self.lock = asyncio.Lock()

    async def wait(self) -> None:
        async with self.lock:
            now = time.monotonic()
            delay = self.next - now
            self.next = max(now, self.next) + self.interval
            if delay > 0:
                await asyncio.sleep(delay)


def request_body(teacher: OpenAITeacher, request: Request, index: int) -> dict:
    body: dict[str, Any] = {
        "model": teacher.model,
        "n": 1,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_tokens": request.max_tokens,
        "seed": request.sample_seed(index),
    }
    if request.stop:
        body["stop"] = list(request.stop)
    if request.tools:
        body["tools"] = list(request.tools)
    if request.continue_final:  # vLLM serve's (and SGLang's) extension: go on with the last assistant message
        body |= {"continue_final_message": True, "add_generation_prompt": False}
    if request.messages is not None:
        body["messages"] = list(request.messages)
    else:
        body["prompt"] = request.prompt
    return body


def _field(data: Any, path: list, where: str) -> Any:
    node = data
    for i, part in enumerate(path):
        ok = (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and part < len(node))
        if not ok:
            raise EngineError(f"{where}: malformed response, no field {_dotted(path[: i + 1])!r}")
        node = node[part]
    return node


def _dotted(path: list) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _typed(value: Any, kind: type | tuple, path: list, where: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise EngineError(f"{where}: malformed response, field {_dotted(path)!r} is {value!r}")
    return value


def parse_response(data: Any, *, chat: bool, where: str, max_tokens: int | None = None,
                   max_prompt: int | None = None, least_prompt: int = 0) -> dict:
    """Text, reasoning, finish reason and token counts (``usage_counts``) of a (chat) completion response
    body, and the tool calls of a chat answer that made some."""
    calls = None
    if chat:
        message = _typed(_field(data, ["choices", 0, "message"], where), dict, ["choices", 0, "message"], where)
        content = message.get("content")
        thought = message.get("reasoning_content", message.get("reasoning"))
        calls = message.get("tool_calls")
        if calls:  # checked where they are used (``bonforge.llm.tools``): a server's calls are hostile text
            _typed(calls, list, ["choices", 0, "message", "tool_calls"], where)
            content = content or ""
        if content is None and thought is None:
            raise EngineError(f"{where}: malformed response, field 'choices[0].message.content' is missing")
        _typed(content if content is not None else "", str, ["choices", 0, "message", "content"], where)
        if thought is not None:
            reasoning, text = _typed(thought, str, ["choices", 0, "message", "reasoning_content"], where), content or ""
        else:
            reasoning, text = split_reasoning(content)
    else:
        reasoning, text = split_reasoning(_typed(_field(data, ["choices", 0, "text"], where), str,
                                                 ["choices", 0, "text"], where))
    finish = _typed(_field(data, ["choices", 0, "finish_reason"], where), str, ["choices", 0, "finish_reason"], where)
    text, reasoning = valid_text(text), None if reasoning is None else valid_text(reasoning)
    usage = usage_counts(data, max_tokens, max_prompt, where, least=(least_prompt, least_tokens(text, reasoning)))
    tools = {"tool_calls": tuple(calls)} if calls else {}
    stop = data["choices"][0].get("stop_reason")  # vLLM serve's extension: the stop string that matched
    return {"text": text, "reasoning": reasoning, "finish_reason": finish, **usage, **tools,
            "stop_reason": stop if isinstance(stop, str) else None}


INT32 = 2**31 - 1


def usage_counts(data: dict, max_tokens: int | None, max_prompt: int | None, where: str,
                 least: tuple[int, int] = (0, 0)) -> dict:
    """The token counts a response reports (``usage``). A count that is missing, not an integer, negative,
    past 32 bits, past what the request can hold (output: its ``max_tokens``; prompt: ``max_prompt``,
    ``Request.prompt_bound``) or under what its text must be (``least``: prompt, output; ``least_tokens``: a
    server that says 0 tokens for a page of text) is unknown: None, and the answer is kept (its cost is
    unknown; a budget counts it at its worst case, ``bonforge.llm.budget``)."""
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    out = {k: usage.get(k) for k in ("prompt_tokens", "completion_tokens")}
    bound = {"prompt_tokens": (least[0], min(max_prompt or INT32, INT32)),
             "completion_tokens": (least[1], min(max_tokens or INT32, INT32))}
    for k, v in out.items():
        if not isinstance(v, int) or isinstance(v, bool) or not bound[k][0] <= v <= bound[k][1]:
            log.debug("%s: usage.%s is %r: token count unknown", where, k, v)
            out[k] = None
    ok = isinstance(cached, int) and not isinstance(cached, bool) and 0 <= cached <= (out["prompt_tokens"] or 0)
    return {**out, "cached_tokens": cached if ok else 0}


def _where(request: Request, index: int) -> str:
    return f"request {request.id} sample {index}"


def _failure(request: Request, index: int, e: BaseException) -> tuple[str, int, str, bool]:
    """A sample that failed alone, as ``unfinished`` takes it."""
    return request.id, index, str(e).removeprefix(f"{_where(request, index)}: "), isinstance(e, RetryableError)


class OpenAIEngine:
    name = "openai"

    def __init__(self, teacher: OpenAITeacher):
        self.teacher = teacher
        self.window = Window(teacher.max_concurrency, initial=teacher.start_concurrency)  # kept from batch to batch

    def start(self) -> None:
        """Nothing to load: the server holds the model."""

    def generate(self, requests: list[Request], progress: Progress | None = None) -> list[list[Completion]]:
        return run_sync(self._generate(requests, progress))

    def close(self) -> None:
        """Nothing to release: each ``generate`` opens and closes its own connection pool."""

    def stream(self, out) -> "Stream":
        """The continuous path (``bonforge.llm.stream``): each sample is sent as soon as the window has room."""
        return Stream(self, out)

    def _client(self) -> tuple[httpx.AsyncClient, "Slots", _StartLimiter | None]:
        """A connection pool, the request window's slots (``bonforge.llm.window``: adaptive, at most
        ``max_concurrency``) and the start limiter, for one event loop."""
        t = self.teacher
        headers = {}
        key = os.environ.get(t.api_key_env) if t.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        limits = httpx.Limits(max_connections=t.max_concurrency, max_keepalive_connections=t.max_concurrency)
        client = httpx.AsyncClient(base_url=t.base_url.rstrip("/") + "/", headers=headers, limits=limits,
                                   timeout=httpx.Timeout(t.timeout_s))
        return client, Slots(self.window), _StartLimiter(t.requests_per_minute) if t.requests_per_minute else None

    async def _generate(self, requests: list[Request], progress: Progress | None) -> list[list[Completion]]:
        client, slots, limiter = self._client()
        said: set[str] = set()
        failed: list[tuple[str, int, str, bool]] = []
        async with client:
            done = 0

            async def counted(request: Request, index: int) -> Completion | str | None:
                nonlocal done
                try:
                    out = await self._sample(client, slots, limiter, request, index, said)
                except (EngineError, RetryableError) as e:  # fails alone
                    failed.append(_failure(request, index, e))
                    if not isinstance(e, RetryableError):  # a retry cannot fix it: no new request is sent, the
                        await slots.close()  # answers in flight are received
                    out = None
                except Closed:
                    failed.append((request.id, index, "not asked: the batch stopped at a failure", False))
                    out = None
                done += 1
                if progress is not None:
                    progress(done)
                return out

            tasks = [asyncio.create_task(counted(r, i)) for r in requests for i in range(r.n)]
            try:
                flat = await asyncio.gather(*tasks)
            except BaseException:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
        out = [_grouped(r, [m for m in flat[pos: pos + r.n] if m is not None])
               for r, pos in zip(requests, itertools.accumulate([0] + [r.n for r in requests]))]
        if failed:
            raise unfinished(out, failed, len(flat))
        return out

    async def _sample(self, client: httpx.AsyncClient, slots: Slots, limiter: _StartLimiter | None,
                      request: Request, index: int, said: set[str]) -> Completion | str:
        """A completion, or the server's message when it rejects the prompt as too long for the window."""
        where = _where(request, index)
        chat = request.messages is not None
        body = request_body(self.teacher, request, index)
        path = "chat/completions" if chat else "completions"

        bill = Bill(self.teacher.prices, request, where)  # the budget's hold on this sample, if a budget is set
        tries = 0

        async def attempt() -> dict:
            nonlocal tries
            tries += 1
            async with bill.trying():  # this try's hold on the budget, if any
                return await once(again=tries > 1)

        async def once(again: bool) -> dict:
            async with slots.held(again=again) as ticket:
                await bill.reserve()
                if limiter:
                    await limiter.wait()
                try:
                    resp = await client.post(path, json=body)
                except httpx.TransportError as e:
                    if isinstance(e, _NOT_SENT):
                        bill.unbilled()
                    if isinstance(e, httpx.TimeoutException):
                        ticket.outcome = CONGESTED
                        raise RetryableError(f"{where}: timed out ({type(e).__name__})") from None
                    raise RetryableError(f"{where}: {type(e).__name__}: {e}") from None
                status, hint = resp.status_code, retry_after_seconds(resp.headers.get("retry-after"))
                ticket.outcome = CONGESTED if status in _CONGESTED_STATUS else OK if status < 400 else NEUTRAL
                ticket.retry_after = hint
            if status >= 400:  # refused: not billed
                bill.unbilled()
            if status in _RETRY_STATUS or status >= 500:
                raise RetryableError(f"{where}: HTTP {status}", hint)
            if too_long(status, resp.text):
                return {"rejected": resp.text}
            if status >= 400:
                raise EngineError(f"{where}: HTTP {status} from {client.base_url}{path}: {resp.text[:500]}")
            try:
                data = resp.json()
            except ValueError:
                raise EngineError(f"{where}: response is not JSON: {resp.text[:200]!r}") from None
            return bill.paid(parse_response(data, chat=chat, where=where, max_tokens=request.max_tokens,
                                            max_prompt=request.prompt_bound(), least_prompt=request.prompt_least()))

        t0 = time.perf_counter()
        fields = await retry_async(attempt, attempts=self.teacher.max_retries + 1, what=where, said=said)
        if "rejected" in fields:
            return fields["rejected"]
        return Completion(request_id=request.id, index=index, seed=request.sample_seed(index), engine=self.name,
                          model=self.teacher.model, latency_s=time.perf_counter() - t0, **fields)


def _grouped(request: Request, samples: list) -> list[Completion]:
    """A request's completions, or none (logged) when the server rejected its prompt as too long."""
    rejected = next((m for m in samples if isinstance(m, str)), None)
    if rejected is None:
        return samples
    log.warning("openai: request %s skipped: the server says it does not fit the model window: %s", request.id,
                rejected[:300])
    return []


class Stream:
    """The engine's requests sent as they are put, on one event loop (a thread of its own) with one connection
    pool, window and start limiter; ``(request, completions)`` put in ``out`` as each request's samples are in.
    A sample that fails alone (refused past its retries, over the budget) puts ``(request, Unfinished)``, with
    the request's other samples received; the stream goes on. Any other exception is put as it is, and the
    stream stops."""

    def __init__(self, engine: OpenAIEngine, out):
        self.engine, self.out = engine, out
        self.loop = asyncio.new_event_loop()
        self.up = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._main(),), name="openai-stream",
                                       daemon=True)
        self.thread.start()
        self.up.wait()

    async def _main(self) -> None:
        self.client, self.slots, self.limiter = self.engine._client()
        self.said: set[str] = set()
        self.stop, self.tasks = asyncio.Event(), set()
        self.up.set()
        async with self.client:
            await self.stop.wait()
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)

    def put(self, requests: list[Request]) -> None:
        for r in requests:
            self.loop.call_soon_threadsafe(self._spawn, r)

    def _spawn(self, request: Request) -> None:
        task = self.loop.create_task(self._one(request))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _one(self, request: Request) -> None:
        samples = await asyncio.gather(*(self.engine._sample(self.client, self.slots, self.limiter, request, i,
                                                             self.said) for i in range(request.n)),
                                       return_exceptions=True)  # each sample fails alone
        errors = [(i, e) for i, e in enumerate(samples) if isinstance(e, BaseException)]
        odd = next((e for _, e in errors if not isinstance(e, (EngineError, RetryableError))), None)
        if odd is not None:  # the reader raises it
            self.out.put(odd)
            self.stop.set()
            return
        got = _grouped(request, [m for m in samples if not isinstance(m, BaseException)])
        self.out.put((request, unfinished([got], [_failure(request, i, e) for i, e in errors], request.n)
                      if errors else got))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join()
        self.loop.close()
