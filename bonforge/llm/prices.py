"""What a model endpoint charges, and what one answer cost (docs/cost.md).

A teacher, a fusor, a judge and a reward-model endpoint may state ``prices`` in US dollars: per million input
(prompt) tokens, per million output tokens, per million cached input tokens, a discount off all of it (a batch
tier), and for local engines per GPU-hour. Prices are execution-only: they never enter a stage key, so a price
change re-prices nothing already built; a row records what it cost when it was made (``cost_usd``).

A local engine (vLLM, transformers) shares its wall time out over the samples of one call by their tokens
(``share_time``): a sample's ``engine_s``. Times the GPUs the engine holds, those are its GPU-seconds.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from pydantic import Field

from bonforge.config_model import Model

if TYPE_CHECKING:
    from bonforge.llm.base import Completion

MILLION = 1_000_000


MOST = 1_000_000.0  # dollars per million tokens (or per GPU-hour): past any real price, and no cost overflows


def _price(description: str):
    return Field(None, ge=0, le=MOST, strict=True, description=description)


class Prices(Model):
    """US dollars an endpoint charges. A price left out is unknown: a row that needs it has no cost (null)."""

    input: float | None = _price("Per million input (prompt) tokens.")
    output: float | None = _price("Per million output (completion) tokens.")
    cached_input: float | None = _price("Per million input tokens the server read from its prompt cache "
                                        "(default: the input price).")
    batch_discount: float = Field(0.0, ge=0, lt=1, strict=True, description="The share taken off every token "
                                  "price (0.5: a batch tier at half price).")
    gpu_hour: float | None = _price("Local engines (vLLM, transformers): per GPU-hour the engine holds.")


def token_cost(prices: Prices | None, prompt: int | None, completion: int | None, cached: int = 0) -> float | None:
    """What ``prompt`` input tokens (``cached`` of them from the server's cache) and ``completion`` output tokens
    cost; None where a price or a count is unknown."""
    if prices is None or prompt is None or completion is None or prices.input is None or prices.output is None:
        return None
    cached = min(max(cached, 0), prompt)
    cached_price = prices.input if prices.cached_input is None else prices.cached_input
    usd = ((prompt - cached) * prices.input + cached * cached_price + completion * prices.output) / MILLION
    return usd * (1 - prices.batch_discount)


def worst_case(prices: Prices | None, prompt: int, max_tokens: int) -> float:
    """The most one request of ``prompt`` tokens may cost: every token at the dearer of the input and cached
    prices, ``max_tokens`` generated (0 where the prices are unknown: nothing to count)."""
    dearer = prices is not None and (prices.cached_input or 0) > (prices.input or 0)  # a cache that costs more
    return token_cost(prices, prompt, max_tokens, cached=prompt if dearer else 0) or 0.0


def gpu_cost(prices: Prices | None, gpu_s: float | None) -> float | None:
    """What ``gpu_s`` GPU-seconds cost at the stated GPU-hour price (None: no price or no time)."""
    if prices is None or prices.gpu_hour is None or gpu_s is None:
        return None
    return gpu_s * prices.gpu_hour / 3600


def completion_cost(prices: Prices | None, c: Completion, gpus: int) -> float | None:
    """What one answer cost: its tokens at the token prices (a server), or its GPU-seconds (``engine_s`` times
    the ``gpus`` its local engine holds) at the GPU-hour price."""
    if c.engine_s is not None:
        return gpu_cost(prices, c.engine_s * gpus)
    return token_cost(prices, c.prompt_tokens, c.completion_tokens, c.cached_tokens)


def share_time(completions: list[Completion], wall_s: float) -> list[Completion]:
    """``completions`` of one engine call that took ``wall_s``, each with its share of that time by its tokens
    (prompt + completion; equal shares when none has any)."""
    weights = [(c.prompt_tokens or 0) + (c.completion_tokens or 0) for c in completions]
    total = sum(weights)
    return [dataclasses.replace(c, engine_s=wall_s * (w / total if total else 1 / len(completions)))
            for c, w in zip(completions, weights)]
