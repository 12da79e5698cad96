"""Prices: what an answer costs at a teacher's stated prices, GPU time shared by tokens, prices refused when
they are not non-negative numbers, and prices kept out of every stage key."""

from __future__ import annotations

from pathlib import Path

import pytest

from bonforge.config import load_recipe
from bonforge.errors import ConfigError
from bonforge.llm.base import Completion
from bonforge.llm.prices import Prices, completion_cost, share_time, token_cost, worst_case
from bonforge.stages import sample

REPO = Path(__file__).resolve().parents[2]
SAMPLED = REPO / "recipes" / "gsm8k-sampled-openai.yaml"


def answer(prompt: int | None, completion: int | None, cached: int = 0, engine_s: float | None = None) -> Completion:
    return Completion(request_id="p", index=0, text="t", reasoning=None, finish_reason="stop", prompt_tokens=prompt,
                      completion_tokens=completion, seed=0, engine="e", model="m", cached_tokens=cached,
                      engine_s=engine_s)


def test_token_prices_per_million_with_the_cache_and_the_batch_discount():
    p = Prices(input=2, output=8)
    assert token_cost(p, 1_000, 500) == pytest.approx((1_000 * 2 + 500 * 8) / 1e6)
    cached = Prices(input=2, output=8, cached_input=0.5)
    assert token_cost(cached, 1_000, 500, cached=600) == pytest.approx((400 * 2 + 600 * 0.5 + 500 * 8) / 1e6)
    assert token_cost(Prices(input=2, output=8), 1_000, 500, cached=600) == token_cost(p, 1_000, 500)  # no price
    half = Prices(input=2, output=8, batch_discount=0.5)
    assert token_cost(half, 1_000, 500) == pytest.approx(token_cost(p, 1_000, 500) / 2)
    assert worst_case(p, 1_000, 4_096) == pytest.approx((1_000 * 2 + 4_096 * 8) / 1e6)


def test_an_unknown_price_or_count_is_no_cost():
    assert token_cost(None, 10, 10) is None
    assert token_cost(Prices(input=1), 10, 10) is None  # no output price
    assert token_cost(Prices(input=1, output=1), None, 10) is None  # the server reported no usable count
    assert completion_cost(Prices(input=1, output=1), answer(None, 5), 0) is None
    assert worst_case(None, 10, 10) == 0.0


def test_local_engines_share_their_wall_time_by_tokens_and_cost_gpu_hours():
    shared = share_time([answer(10, 30), answer(20, 20), answer(0, 20)], 10.0)
    assert [c.engine_s for c in shared] == pytest.approx([4.0, 4.0, 2.0])
    assert [c.engine_s for c in share_time([answer(0, 0), answer(0, 0)], 3.0)] == [1.5, 1.5]
    gpu = Prices(gpu_hour=3.6)
    assert completion_cost(gpu, answer(10, 30, engine_s=4.0), gpus=2) == pytest.approx(4.0 * 2 * 3.6 / 3600)
    assert completion_cost(gpu, answer(10, 30, engine_s=4.0), gpus=0) == 0.0  # CPU: no GPU held
    assert completion_cost(Prices(input=1, output=1), answer(10, 30, engine_s=4.0), gpus=1) is None


@pytest.mark.parametrize("value, said", [
    ("-1", "greater than or equal to 0"),
    ("'1.5'", "valid number"),
    ("cheap", "valid number"),
    ("true", "valid number"),
    (".nan", "finite number"),
    ("1.0e+308", "less than or equal to 1000000"),
])
def test_a_price_that_is_not_a_non_negative_number_is_refused(value, said):
    with pytest.raises(ConfigError, match=rf"teachers\.0\.prices\.output: .*{said}"):
        load_recipe(SAMPLED, [f"teachers.0.prices.output={value}"])


def test_a_batch_discount_of_all_or_more_and_an_unknown_price_are_refused():
    with pytest.raises(ConfigError, match=r"teachers\.0\.prices\.batch_discount: .*less than 1"):
        load_recipe(SAMPLED, ["teachers.0.prices.batch_discount=1"])
    with pytest.raises(ConfigError, match=r"teachers\.0\.prices\.outptu: unknown field"):
        load_recipe(SAMPLED, ["teachers.0.prices.outptu=1"])


def test_prices_enter_no_stage_key():
    plain = load_recipe(SAMPLED)
    priced = load_recipe(SAMPLED, ["teachers.0.prices={input: 0.15, output: 0.6, cached_input: 0.075}"])
    assert priced.teachers[0].prices == Prices(input=0.15, output=0.6, cached_input=0.075)
    assert sample.key_config(priced.teachers[0]) == sample.key_config(plain.teachers[0])
    assert sample.sample_settings(priced.teachers[0]) == sample.sample_settings(plain.teachers[0])
