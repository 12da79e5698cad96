"""A budget: no request is sent that could take the spend over it (requests in flight count at their worst
case), the spend stops within one request's worst case of it, and every request the server answered is paid
for; budgets refused before any work (below one request, no prices, not a number)."""

from __future__ import annotations

import asyncio

import pytest
from llm_server import ScriptedServer

from bonforge.config import load_recipe
from bonforge.errors import ConfigError
from bonforge.llm.base import Request
from bonforge.llm.base import Unfinished, UnfinishedForNow
from bonforge.llm.budget import Budget, OverBudget, request_worst, spending
from bonforge.llm.config import OpenAITeacher
from bonforge.llm.openai import OpenAIEngine
from bonforge.llm.prices import Prices, token_cost

PRICES = Prices(input=100.0, output=1000.0)  # dollars per million tokens: a request costs about a cent


def teacher(url: str, **kw) -> OpenAITeacher:
    return OpenAITeacher(**{"engine": "openai", "name": "t", "model": "m", "base_url": url, "api_key_env": None,
                            "max_tokens": 32, "max_retries": 0, "prices": PRICES, **kw})


def chat(i: int, n: int = 4) -> Request:
    return Request(id=f"p{i}", messages=({"role": "user", "content": f"question {i}"},), n=n, max_tokens=32, seed=i)


def paid(server: ScriptedServer, skip: int = 0) -> float:
    """What the requests the server answered cost, by the usage it reported (``llm_server.answer``), the first
    ``skip`` left out."""
    import json

    return sum(token_cost(PRICES, len(json.dumps(b["messages"], sort_keys=True)) // 4, 7)
               for b in server.bodies[skip:])


def test_a_budget_holds_requests_in_flight_at_their_worst_case():
    async def go():
        b = Budget(1.0)
        await b.reserve(0.4, "a")
        await b.reserve(0.4, "b")
        waiting = asyncio.ensure_future(b.reserve(0.4, "c"))  # 0.8 held: no room until one settles
        await asyncio.sleep(0.1)
        assert not waiting.done() and b.in_flight == 2
        b.settle(0.4, 0.1)  # it cost less than its worst case: room for c
        await asyncio.wait_for(waiting, 5)
        b.settle(0.4, 0.3)
        b.settle(0.4, 0.5)  # spent 0.9, nothing in flight: 0.4 can never fit
        with pytest.raises(OverBudget, match="d: not sent: over the budget"):
            await b.reserve(0.4, "d")
        with pytest.raises(OverBudget):  # once exhausted, even a request that fits is not sent
            await b.reserve(0.01, "e")
        return b

    b = asyncio.run(go())
    assert b.spent_usd == pytest.approx(0.9) and b.exhausted and b.json()["refused_usd"] == 0.4
    assert b.line().startswith("budget: spent $0.9000 of $1, $0.1000 left; stopped: the next request could cost up "
                               "to $0.4000")


@pytest.mark.parametrize("concurrency", [1, 8])
def test_the_engine_stops_within_one_request_of_the_budget_and_pays_for_every_answer(concurrency):
    worst = request_worst(PRICES, chat(10))
    limit = 10.5 * worst
    with ScriptedServer(delay_s=0.01) as server, spending(limit) as budget:
        with pytest.raises(Unfinished, match="not sent: over the budget") as stopped:
            OpenAIEngine(teacher(server.url, max_concurrency=concurrency)).generate([chat(i) for i in range(400)])
    assert budget.spent_usd <= limit and limit - budget.spent_usd < worst  # stopped within one worst case
    received = sum(len(c) for c in stopped.value.results)  # every answer received is kept, the rest unasked
    assert received == server.count and not isinstance(stopped.value, UnfinishedForNow)  # a retry cannot help
    assert budget.spent_usd == pytest.approx(paid(server))  # each answer paid for at its reported usage
    assert server.count > 10  # answers cost less than their worst case: more than limit / worst were sent


def test_without_a_budget_or_without_prices_nothing_is_held():
    with ScriptedServer() as server:
        with spending(None):
            OpenAIEngine(teacher(server.url)).generate([chat(0)])
        with spending(0.0) as budget:  # an endpoint without prices is not counted (a recipe refuses such a budget)
            OpenAIEngine(teacher(server.url, prices=None)).generate([chat(1)])
    assert server.count == 8 and budget.spent_usd == 0 and not budget.exhausted


@pytest.mark.parametrize("usage", [None, {"prompt_tokens": -5, "completion_tokens": 7},
                                   {"prompt_tokens": 5, "completion_tokens": 10**9},
                                   {"prompt_tokens": 0, "completion_tokens": 0}])  # was free: no budget held
def test_an_answer_without_usable_usage_is_counted_at_its_worst_case(usage):
    def script(n, body):
        reply = {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}
        return 200, {}, reply if usage is None else {**reply, "usage": usage}

    with ScriptedServer(script) as server, spending(1.0) as budget:
        OpenAIEngine(teacher(server.url)).generate([chat(0, n=2)])
    assert budget.spent_usd == pytest.approx(2 * request_worst(PRICES, chat(0)))


def test_a_429_is_not_billed():
    def script(n, body):
        return (429, {"Retry-After": "0"}, {"error": "busy"}) if n == 0 else (200, {}, None)

    with ScriptedServer(script) as server, spending(1.0) as budget:
        OpenAIEngine(teacher(server.url, max_retries=1)).generate([chat(0, n=1)])
    assert server.count == 2 and budget.spent_usd == pytest.approx(paid(server) / 2)  # the answer only
    assert budget.in_flight == 0 and budget.held_usd == 0


SAMPLED = "recipes/gsm8k-sampled-openai.yaml"
PRICED = ["teachers.0.prices={input: 1, output: 10}", "teachers.1.prices={input: 2, output: 20}"]


@pytest.mark.parametrize("value, said", [
    ("0", r"budget: 0 dollars is below what one request may cost \(\$0\.081921: teachers\.0, max_tokens 8192"),
    ("0.05", r"budget: 0.05 dollars is below"),
    ("-1", r"budget: Input should be greater than or equal to 0"),
    ("abc", r"budget: Input should be a valid number"),
    ("'1'", r"budget: Input should be a valid number"),
])
def test_a_budget_that_cannot_pay_for_one_request_or_is_not_a_number_is_refused(value, said):
    with pytest.raises(ConfigError, match=said):
        load_recipe(SAMPLED, [*PRICED, f"budget={value}"])
    assert load_recipe(SAMPLED, [*PRICED, "budget=0.1"]).budget == 0.1  # the control: one request fits


def test_a_budget_without_prices_is_refused():
    with pytest.raises(ConfigError, match="budget: it counts what endpoints with token prices spend, and none"):
        load_recipe(SAMPLED, ["budget=10"])
    with pytest.raises(ConfigError, match="none states them"):  # an output price alone is no token price
        load_recipe(SAMPLED, ["budget=10", "teachers.0.prices={output: 10}"])


@pytest.mark.parametrize("args, said", [
    (["--budget", "0"], "budget: 0 dollars is below what one request may cost"),
    (["--budget", "lots"], "budget: Input should be a valid number (got 'lots')"),
    (["--budget", "1e-3"], "budget: 0.001 dollars is below what one request may cost"),  # was "not a number"
    (["--budget", "nan"], "budget: Input should be a valid number (got 'nan')"),
    (["--budget", "1e999"], "budget: Input should be a finite number (got inf)"),  # read as YAML 1.2 reads it
    (["--budget", "10", "--set", "teachers.0.prices.input=-1"], "teachers.0.prices.input: Input should be greater"),
    (["--budget", "10", "--set", "teachers.0.prices.input='1'"], "teachers.0.prices.input: Input should be a valid "
                                                                  "number"),
])
def test_bad_prices_and_budgets_are_one_error_line_before_any_work(tmp_path, args, said):
    from typer.testing import CliRunner

    from bonforge.cli import app

    base = ["--set", PRICED[0], "--set", PRICED[1]]
    out = CliRunner().invoke(app, ["run", SAMPLED, "--store", str(tmp_path / "store"), *base, *args])
    assert out.exit_code == 2 and said in out.output, out.output
    assert [line for line in out.output.splitlines() if line.strip()][0].startswith("error: ")
    assert len(out.output.strip().splitlines()) == 1 and not (tmp_path / "store").exists()


def generate_within(engine: OpenAIEngine, requests: list[Request], seconds: float = 60.0):
    """``engine.generate(requests)`` in a thread: its result or error, or AssertionError when it hangs."""
    import threading

    out: dict = {}

    def go():
        try:
            out["result"] = engine.generate(requests)
        except BaseException as e:  # noqa: BLE001 (handed to the test)
            out["error"] = e

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the batch hangs"
    return out


@pytest.mark.parametrize("room", [1.5, 10.5])
def test_a_sample_waiting_to_be_retried_never_deadlocks_the_window(room):
    """A sample refused (429) waits for its next try holding no window slot; a sample holding the window's only
    slot waits for room in the budget. Held over the wait, the first's worst case left the second no room and
    the second's slot left the first no try: the batch hung. The control (room for ten): same answers."""
    def script(n, body):
        return (429, {"Retry-After": "0"}, {"error": "busy"}) if n == 0 else (200, {}, None)

    with ScriptedServer(script) as server, spending(room * request_worst(PRICES, chat(0))) as budget:
        out = generate_within(OpenAIEngine(teacher(server.url, max_concurrency=1, max_retries=2)),
                              [chat(i, n=1) for i in range(3)])
    assert "error" not in out and [len(c) for c in out["result"]] == [1, 1, 1]
    assert server.count == 4 and budget.spent_usd == pytest.approx(paid(server, skip=1))  # the 429 not billed
    assert budget.in_flight == 0 and budget.held_usd == 0


def test_a_try_that_timed_out_counts_its_worst_case_and_the_budget_holds_what_the_server_may_bill():
    """A read time-out leaves the server generating (and billing) an answer nobody reads: every try it received
    counts its worst case, so what it may bill stays in the budget (it was counted as nothing, and each try of
    each sample went out)."""
    worst = request_worst(PRICES, chat(0))
    slow = teacher("", timeout_s=0.2, max_retries=3, max_concurrency=4)
    with ScriptedServer(delay_s=1.0) as server, spending(2.5 * worst) as budget:
        out = generate_within(OpenAIEngine(slow.model_copy(update={"base_url": server.url})),
                              [chat(i, n=1) for i in range(6)])
    assert isinstance(out["error"], Unfinished)
    assert server.count == 2 and budget.spent_usd == pytest.approx(server.count * worst)
    assert budget.spent_usd <= budget.limit_usd
    assert "not sent: over the budget" in str(out["error"])


def test_a_request_that_never_reached_the_server_costs_nothing():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with spending(2.5 * request_worst(PRICES, chat(0))) as budget:
        out = generate_within(OpenAIEngine(teacher(url, max_retries=1)), [chat(0, n=2)])
    assert "ConnectError" in str(out["error"]) and budget.spent_usd == 0 and not budget.exhausted


@pytest.mark.parametrize("body", [{"error": {"message": "quota"}}, b"<html>oops</html>", None])
def test_an_http_200_that_is_no_answer_counts_its_worst_case(body):
    """The server said 200 (it may bill) but sent an error body or no JSON: its worst case (was nothing). The
    control (an answer): its reported usage."""
    with ScriptedServer(lambda n, b: (200, {}, body)) as server, spending(1.0) as budget:
        out = generate_within(OpenAIEngine(teacher(server.url)), [chat(0, n=1)])
    expected = paid(server) if body is None else request_worst(PRICES, chat(0))
    assert server.count == 1 and budget.spent_usd == pytest.approx(expected) and ("error" in out) == (body is not None)


def test_a_cached_price_above_the_input_price_cannot_take_the_spend_over_the_budget():
    """Prompt tokens read from the cache at a dearer price cost more than the worst case counted them at (all
    uncached): spent $0.0100 of a $0.0028 budget. The control: a cache cheaper than input keeps the old bound."""
    from llm_server import answer

    def all_cached(n, body):
        reply = answer(body)
        reply["usage"]["prompt_tokens_details"] = {"cached_tokens": reply["usage"]["prompt_tokens"]}
        return 200, {}, reply

    dear = Prices(input=1.0, output=1.0, cached_input=1000.0)
    worst = request_worst(dear, chat(0))
    assert worst == pytest.approx(token_cost(dear, chat(0).prompt_bound(), 32, cached=chat(0).prompt_bound()))
    cheap = Prices(input=1.0, output=1.0, cached_input=0.5)
    assert request_worst(cheap, chat(0)) == pytest.approx(token_cost(cheap, chat(0).prompt_bound(), 32))
    limit = 5 * token_cost(dear, chat(0).prompt_bound(), 32)  # five requests' worst case, all uncached
    with ScriptedServer(all_cached) as server, spending(limit) as budget:
        out = generate_within(OpenAIEngine(teacher(server.url, prices=dear, max_concurrency=1)),
                              [chat(i, n=1) for i in range(20)])
    assert "not sent: over the budget" in str(out["error"]) and budget.spent_usd <= limit
