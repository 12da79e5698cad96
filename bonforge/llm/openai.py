"""The `openai` engine: any OpenAI-compatible server (vLLM serve, SGLang, hosted APIs) over async HTTP.

Each sample is its own request with its own seed (``n=1``, ``seed + index``), so a sample can be asked for
again alone. Concurrency is bounded, request starts can be rate limited, and 429/5xx/timeouts are retried
with exponential backoff that honours ``Retry-After``. A request the server rejects because the prompt does
not fit its context window gets no completions and is reported, as in the other engines.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import email.utils
import logging
import os
import time
from typing import Any, Awaitable, TypeVar

import httpx

from bonforge.llm.base import (Completion, EngineError, Progress, Request, RetryableError, retry_async,
                               split_reasoning)
from bonforge.llm.config import OpenAITeacher

T = TypeVar("T")
_RETRY_STATUS = {408, 409, 425, 429}
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
    """A ``Retry-After`` header (seconds or an HTTP date) as seconds from now."""
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
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


def parse_response(data: Any, *, chat: bool, where: str) -> dict:
    """Text, reasoning, finish reason and token counts of a (chat) completion response body, and the tool calls
    of a chat answer that made some."""
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
    usage = {k: _typed(_field(data, ["usage", k], where), int, ["usage", k], where)
             for k in ("prompt_tokens", "completion_tokens")}
    tools = {"tool_calls": tuple(calls)} if calls else {}
    stop = data["choices"][0].get("stop_reason")  # vLLM serve's extension: the stop string that matched
    return {"text": text, "reasoning": reasoning, "finish_reason": finish, **usage, **tools,
            "stop_reason": stop if isinstance(stop, str) else None}


class OpenAIEngine:
    name = "openai"

    def __init__(self, teacher: OpenAITeacher):
        self.teacher = teacher

    def start(self) -> None:
        """Nothing to load: the server holds the model."""

    def generate(self, requests: list[Request], progress: Progress | None = None) -> list[list[Completion]]:
        return run_sync(self._generate(requests, progress))

    def close(self) -> None:
        """Nothing to release: each ``generate`` opens and closes its own connection pool."""

    async def _generate(self, requests: list[Request], progress: Progress | None) -> list[list[Completion]]:
        t = self.teacher
        headers = {}
        key = os.environ.get(t.api_key_env) if t.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        limits = httpx.Limits(max_connections=t.max_concurrency, max_keepalive_connections=t.max_concurrency)
        gate = asyncio.Semaphore(t.max_concurrency)
        limiter = _StartLimiter(t.requests_per_minute) if t.requests_per_minute else None
        async with httpx.AsyncClient(base_url=t.base_url.rstrip("/") + "/", headers=headers, limits=limits,
                                     timeout=httpx.Timeout(t.timeout_s)) as client:
            done = 0

            async def counted(request: Request, index: int) -> Completion | str:
                nonlocal done
                out = await self._sample(client, gate, limiter, request, index)
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
        out, pos = [], 0
        for r in requests:
            mine, pos = flat[pos: pos + r.n], pos + r.n
            rejected = next((m for m in mine if isinstance(m, str)), None)
            if rejected is not None:
                log.warning("openai: request %s skipped: the server says it does not fit the model window: %s",
                            r.id, rejected[:300])
            out.append([] if rejected is not None else mine)
        return out

    async def _sample(self, client: httpx.AsyncClient, gate: asyncio.Semaphore, limiter: _StartLimiter | None,
                      request: Request, index: int) -> Completion | str:
        """A completion, or the server's message when it rejects the prompt as too long for the window."""
        where = f"request {request.id} sample {index}"
        chat = request.messages is not None
        body = request_body(self.teacher, request, index)
        path = "chat/completions" if chat else "completions"

        async def attempt() -> dict:
            async with gate:
                if limiter:
                    await limiter.wait()
                try:
                    resp = await client.post(path, json=body)
                except httpx.TimeoutException as e:
                    raise RetryableError(f"{where}: timed out ({type(e).__name__})") from None
                except httpx.TransportError as e:
                    raise RetryableError(f"{where}: {type(e).__name__}: {e}") from None
            if resp.status_code in _RETRY_STATUS or resp.status_code >= 500:
                raise RetryableError(f"{where}: HTTP {resp.status_code}",
                                     retry_after_seconds(resp.headers.get("retry-after")))
            if too_long(resp.status_code, resp.text):
                return {"rejected": resp.text}
            if resp.status_code >= 400:
                raise EngineError(f"{where}: HTTP {resp.status_code} from {client.base_url}{path}: {resp.text[:500]}")
            try:
                data = resp.json()
            except ValueError:
                raise EngineError(f"{where}: response is not JSON: {resp.text[:200]!r}") from None
            return parse_response(data, chat=chat, where=where)

        t0 = time.perf_counter()
        fields = await retry_async(attempt, attempts=self.teacher.max_retries + 1, what=where)
        if "rejected" in fields:
            return fields["rejected"]
        return Completion(request_id=request.id, index=index, seed=request.sample_seed(index), engine=self.name,
                          model=self.teacher.model, latency_s=time.perf_counter() - t0, **fields)
