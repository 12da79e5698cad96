"""`bonforge run --budget`: a build against a priced, served teacher stops within one request's worst case of its
budget, ends with one line saying what it spent and left, is recorded as stopped by the budget, keeps every
shard it finished; a rerun with a larger budget asks only for what is new and builds the dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llm_server import ScriptedServer, adder
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.llm.budget import request_worst
from bonforge.llm.prices import Prices
from bonforge.stages.sample import Sampler
from bonforge.storage.store import StageStore

PROBLEMS, N, MAX_TOKENS = 12, 4, 64
PRICES = Prices(input=100.0, output=1000.0)
pytestmark = pytest.mark.slow  # Prefect


def recipe(tmp_path: Path, url: str) -> Path:
    (tmp_path / "problems.jsonl").write_text("".join(
        json.dumps({"question": f"What is {i} + {2 * i}?", "answer": str(3 * i)}) + "\n" for i in range(PROBLEMS)))
    path = tmp_path / "recipe.yaml"
    path.write_text(f"""
name: budgeted
problems: {{name: toy, source: {{path: problems.jsonl}}}}
teachers:
  - {{name: a, engine: openai, model: m, base_url: "{url}", api_key_env: null, n: {N}, max_tokens: {MAX_TOKENS},
     max_retries: 0, max_concurrency: 2, shard_problems: 1, prices: {{input: {PRICES.input}, output: {PRICES.output}}}}}
export: {{name: toy-genselect}}
""")
    return path


def worst_request(path: Path) -> float:
    """The largest worst case of one of the recipe's requests."""
    from bonforge.config import load_recipe
    from bonforge.sources import data
    from bonforge.sources.problems import load_problems

    r = load_recipe(str(path))
    problems = load_problems(r.problems, data.resolve(r.problems.source, path.parent))
    return max(request_worst(PRICES, req) for req, _ in Sampler(r.teachers[0]).requests(problems))


def test_a_build_stops_at_its_budget_and_a_rerun_pays_only_for_what_is_new(tmp_path, shared_prefect):
    store = tmp_path / "store"
    runner = CliRunner()
    with ScriptedServer(adder("So the answer is \\boxed{{{value}}}.")) as server:
        path = recipe(tmp_path, server.url)
        worst = worst_request(path)
        budget = 3 * worst  # answers cost about a seventh of their worst case: about 20 requests
        stopped = runner.invoke(app, ["run", str(path), "--store", str(store), "--budget", f"{budget:.6f}"])
        first = server.count
        assert stopped.exit_code == 3, stopped.output
        rerun = runner.invoke(app, ["run", str(path), "--store", str(store), "--budget", "5"])
        assert rerun.exit_code == 0, rerun.output
    said = [line for line in stopped.output.splitlines() if line.startswith("budget:")]
    assert len(said) == 1 and "stopped: the next request could cost up to" in said[0], stopped.output
    assert "error:" not in stopped.output
    st = StageStore(store)
    record = st.runs()[0]
    assert record.status == "stopped_by_budget" and record.error == said[0]
    spent = record.extra["budget"]["spent_usd"]
    assert spent <= budget and budget - spent < worst  # within one request's worst case of the budget
    assert first > 12  # each answer cost less than its worst case
    (key,) = st.runs()[1]["stages"]["candidates"]
    assert st.manifest("candidates", key)["rows_resumed"] >= N * (first // N - 2)  # whole shards before the stop
    assert server.count - first == PROBLEMS * N - first  # every answer received was kept (a partial shard's too):
    # the rerun asked only for the rows never answered
    assert "budget: spent $" in rerun.output and "left" in rerun.output and "stopped" not in rerun.output
    listed = runner.invoke(app, ["runs", "--store", str(store)], env={"COLUMNS": "400"})
    assert "stopped_by_budget" in listed.output, listed.output
