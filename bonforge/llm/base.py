"""The one engine interface: requests in, completions out.

A request asks for ``n`` samples; sample ``i`` is drawn with seed ``seed + i`` and records that seed, so any
single sample can be regenerated on its own. Engines never see problems or tables, only requests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
from collections import Counter
import re
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Protocol, TypeVar

import numpy as np
import pyarrow as pa

from bonforge.errors import BonforgeError, TransientError, reasons

log = logging.getLogger("bonforge")

T = TypeVar("T")
Progress = Callable[[int], None]  # ``generate``'s report: the samples done so far
TEMPLATE_TOKENS = 16  # a chat template's tokens around one message, at most (role markers, turn ends)
TEMPLATE_OWN_TOKENS = 512  # what a chat template may add of its own (a default system prompt: SmolLM2's, Qwen's)
MOST_TOKEN_BYTES = 256  # the longest token of a tokenizer in use, in UTF-8 bytes, with room to spare


def least_tokens(*texts: object) -> int:
    """The fewest tokens the texts can be (``MOST_TOKEN_BYTES`` each at most; no token spans two texts; what is
    not a string, an image part say, counts none)."""
    return sum(-(-len(t.encode()) // MOST_TOKEN_BYTES) for t in texts if isinstance(t, str))


@dataclass(frozen=True)
class Request:
    """One prompt and how to sample it. Exactly one of ``messages`` (chat) or ``prompt`` (raw text)."""

    id: str
    messages: tuple[dict, ...] | None = None
    prompt: str | None = None
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    seed: int = 0
    stop: tuple[str, ...] = ()
    tools: tuple[dict, ...] | None = None  # OpenAI-style tool definitions the model may call (chat only)
    continue_final: bool = False  # chat: the model goes on with the last (assistant) message's text, no new turn

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError(f"request {self.id}: give exactly one of messages or prompt")
        if self.n < 1 or self.max_tokens < 1:
            raise ValueError(f"request {self.id}: n and max_tokens must be positive")

    def sample_seed(self, index: int) -> int:
        return self.seed + index

    def prompt_least(self) -> int:
        """The fewest tokens the prompt can be (``least_tokens`` of its texts)."""
        return least_tokens(self.prompt) if self.messages is None else least_tokens(
            *(m.get("content") for m in self.messages))

    def prompt_bound(self) -> int:
        """The most tokens the prompt can be: one per byte, plus ``TEMPLATE_TOKENS`` per message and, for chat,
        ``TEMPLATE_OWN_TOKENS`` and the tools' definitions (a server's template adds its own text: a count past
        the bytes alone was taken as untrusted, and vLLM serve's every SmolLM2 count was lost)."""
        if self.messages is None:
            return len(str(self.prompt).encode()) + TEMPLATE_TOKENS
        texts = [m.get("content") or "" for m in self.messages]
        tools = len(json.dumps(self.tools).encode()) if self.tools else 0
        return sum(len(str(t).encode()) + TEMPLATE_TOKENS for t in texts) + TEMPLATE_OWN_TOKENS + tools


@dataclass(frozen=True)
class Completion:
    """One sample of one request. ``text`` is the final response, ``reasoning`` the split-off thinking."""

    request_id: str
    index: int
    text: str
    reasoning: str | None
    finish_reason: str
    prompt_tokens: int | None  # None: the server reported no usable count
    completion_tokens: int | None
    seed: int
    engine: str
    model: str
    latency_s: float = field(default=0.0, compare=False)
    cached_tokens: int = field(default=0, compare=False)  # prompt tokens the server read from its cache
    engine_s: float | None = field(default=None, compare=False)  # local engines: this sample's share of the
    # engine's wall time (``bonforge.llm.prices.share_time``)
    tool_calls: tuple[dict, ...] | None = None  # the calls the model made instead of answering (chat tools)
    messages: str | None = None  # a trajectory's whole conversation (``bonforge.tables.trajectories``), as JSON
    stop_reason: str | None = None  # the stop string that ended the sample, where the engine says which


class Engine(Protocol):
    """``generate`` returns, for each request in order, its completions ordered by sample index. With
    ``progress``, it calls ``progress(k)`` as samples finish: ``k`` of the requests' samples are done.

    A request the engine cannot serve without aborting the batch (a prompt longer than the model window)
    gets an empty list and is logged; everything else that fails raises, an engine whose samples fail one by
    one (``openai``) with ``Unfinished``, which holds every completion received.
    """

    name: str

    def start(self) -> None:
        """Load the model / start workers (idempotent; ``generate`` calls it too)."""

    def generate(self, requests: list[Request], progress: Progress | None = None) -> list[list[Completion]]: ...

    def close(self) -> None: ...


class EngineError(BonforgeError):
    """An engine answered something unusable (malformed response, rejected request). Not retried."""


class RetryableError(TransientError):
    """A failure worth retrying (HTTP 429/5xx, timeout); ``retry_after`` is the server's hint in seconds."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.message, self.retry_after = message, retry_after

    def __reduce__(self):
        return (self.__class__, (self.message, self.retry_after))


class Unfinished(EngineError):
    """Some samples of a batch failed, each alone after its tries (the others were asked to the end).
    ``results``: per request, the completions received (in sample order, the failed ones left out);
    ``failed``: (request id, sample index, why) of each failed sample."""

    def __init__(self, results: list[list[Completion]], failed: list[tuple[str, int, str]], total: int):
        self.results, self.failed, self.total = results, failed, total
        rid, index, why = failed[0]
        super().__init__(f"{len(failed)} of {total} samples failed ({reasons(self.why)}); the first: request "
                         f"{rid} sample {index}: {why}")

    @property
    def why(self) -> dict[str, int]:
        """Reason -> samples."""
        return dict(Counter(why for *_, why in self.failed))

    def __reduce__(self):
        return (self.__class__, (self.results, self.failed, self.total))


class UnfinishedForNow(Unfinished, TransientError):
    """Every failure was transient (429, 5xx, timeouts): a later try may get those samples."""


def unfinished(results: list[list[Completion]], failed: list[tuple[str, int, str, bool]], total: int) -> Unfinished:
    """The error of a batch whose samples ``failed`` (each with whether its failure was transient)."""
    kind = UnfinishedForNow if all(f[3] for f in failed) else Unfinished
    return kind(results, [f[:3] for f in failed], total)


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate (JSON may escape one: ``"\\ud800"``; no Arrow column holds it) as
    U+FFFD: what a server sends is stored as valid Unicode."""
    return _SURROGATE.sub("\ufffd", text)


_SURROGATE = re.compile("[\ud800-\udfff]")  # a str holds a pair as one character: any of these is lone


def problem_seed(base: int, problem_id: str) -> int:
    """The seed of sample 0 of a problem; sample i uses this + i. Stable across runs and shard plans."""
    digest = hashlib.sha256(f"{base}/{problem_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


def problem_seeds(base: int, problem_ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``problem_seed(base, id)`` of every id of a column at once (DuckDB's SHA-256 over the column)."""
    from bonforge import identity

    digest = identity.sha256([problem_ids], f"{base}/", raw=True)[:, :4]
    return (digest.copy().view(">u4").reshape(-1) >> 1).astype(np.int64)


def consecutive(indices: list[int]) -> list[tuple[int, int]]:
    """``(start, count)`` of each run of consecutive values in sorted ``indices``: the requests (seed
    ``problem_seed + start``, ``n = count``) that draw exactly those samples."""
    out: list[tuple[int, int]] = []
    for i in indices:
        if out and out[-1][0] + out[-1][1] == i:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((i, 1))
    return out


def fits(prompt_tokens: int, max_tokens: int, window: int) -> bool:
    """Whether a prompt leaves ``max_tokens`` of the model window. A request that does not fit gets no
    completions and is logged with ``log_skipped`` (the sampling stage reports it as short of ``n``)."""
    return prompt_tokens + max_tokens <= window


def log_skipped(engine: str, request: Request, prompt_tokens: int, window: int) -> None:
    log.warning("%s: request %s skipped: prompt of %d tokens + max_tokens %d exceeds the model window %d",
                engine, request.id, prompt_tokens, request.max_tokens, window)


def split_reasoning(text: str) -> tuple[str | None, str]:
    """``(reasoning, final)`` of a thinking model's output.

    ``<think>R</think>F`` → ``(R, F)``; a missing opening tag (chat templates often put it in the prompt)
    is tolerated; an unclosed ``<think>`` (output cut by max_tokens) is all reasoning and no answer.
    """
    head, sep, tail = text.partition("</think>")
    if sep:
        reasoning = head.split("<think>", 1)[1] if "<think>" in head else head
        return reasoning.strip(), tail.strip()
    before, sep, after = text.partition("<think>")
    if sep and not before.strip():
        return after.strip(), ""
    return None, text


def truncate_at_stop(text: str, stop: tuple[str, ...]) -> tuple[str, str | None]:
    """Cut ``text`` before the earliest stop string; says which one was found (None: none)."""
    cut, found = min(((i, s) for s in stop if (i := text.find(s)) >= 0), default=(-1, None))
    return (text[:cut], found) if cut >= 0 else (text, None)


def retry_delay(attempt: int, hint: float | None, base_delay: float = 0.5, max_delay: float = 30.0,
                spread: float | None = None) -> float:
    """Seconds to wait before try ``attempt + 1``: the exponential backoff or the server's hint, whichever is
    longer (a ``Retry-After: 0`` does not make a busy server's clients come back at once), at most
    ``max_delay``, then stretched by up to half at random (``spread``, 0 to 1: drawn unless given; 1 is the
    longest wait): requests told the same second do not come back together."""
    wanted = max(hint or 0.0, base_delay * 2 ** (attempt - 1))
    return min(wanted, max_delay) * (1.0 + 0.5 * (random.random() if spread is None else spread))


async def retry_async(
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int,
    base_delay: float = 0.5,
    max_delay: float = 30.0,
    what: str = "request",
    said: set[str] | None = None,
) -> T:
    """Await ``call()``; on ``TransientError`` wait (``retry_delay``: backoff with jitter, or the error's
    ``retry_after`` hint, capped at ``max_delay``) and try again, up to ``attempts`` tries in all. Other errors
    pass through at once. A hint over the cap is said once per ``said`` (the calls of one batch)."""
    for attempt in range(1, attempts):
        try:
            return await call()
        except TransientError as e:
            hint = getattr(e, "retry_after", None)
            if hint is not None and hint > max_delay and (said is None or "cap" not in said):
                log.warning("%s: the server asks to wait %.0f s; bonforge waits %.0f s at most", what, hint, max_delay)
                if said is not None:
                    said.add("cap")
            delay = retry_delay(attempt, hint, base_delay, max_delay)
            log.info("%s: %s; retry %d/%d in %.2fs", what, e, attempt, attempts - 1, delay)
            await asyncio.sleep(delay)
    return await call()
