"""`bonforge run` with a sampled teacher: the openai engine against a real local server samples, then
verification, stats, GenSelect and export run on the new candidates; a second run reuses every stage."""

from __future__ import annotations

import json
import time

import pytest

from golden_keys import assert_golden
from llm_server import LimitedServer, ScriptedServer, adder
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.storage.store import StageStore

N = 8
pytestmark = pytest.mark.slow  # Prefect + Ray start-up


solver = adder("<think>add them</think>So the answer is \\boxed{{{value}}}.")  # pass rate 0.25: GenSelect keeps it


def test_run_samples_then_builds_the_dataset(tmp_path, shared_prefect):
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps({"question": f"What is {i} + {2 * i}?", "answer": str(3 * i)}) + "\n"
                                for i in range(1, 7)))
    with ScriptedServer(solver) as server:
        recipe = tmp_path / "recipe.yaml"
        recipe.write_text(f"""
name: sampled
problems: {{name: toy, source: {{path: problems.jsonl}}}}  # beside the recipe: the keys are pinned
teachers:
  - {{name: served, engine: openai, model: m, base_url: "{server.url}", api_key_env: null, n: {N},
     max_tokens: 64, shard_problems: 4}}
export: {{name: toy-genselect}}
""")
        runner = CliRunner()
        first = runner.invoke(app, ["run", str(recipe), "--store", str(tmp_path / "store")])
        assert first.exit_code == 0, first.output
        assert server.count == 6 * N
        second = runner.invoke(app, ["run", str(recipe), "--store", str(tmp_path / "store")])
        assert second.exit_code == 0, second.output
        assert server.count == 6 * N  # nothing resampled
    store = StageStore(tmp_path / "store")
    run = store.run()
    assert_golden("sampled", run)
    (cand_key,) = run["stages"]["candidates"]
    man = store.manifest("candidates", cand_key)
    assert man["rows"] == 6 * N and man["teacher"] == "served" and man["tokens"]["completion"] == 7 * 6 * N
    (verdict_key,) = run["stages"]["verdicts"]
    verdicts = store.read("verdicts", verdict_key)
    assert sum(verdicts.column("correct").to_pylist()) == 6 * N // 4
    (gs_key,) = run["stages"]["genselect"]
    assert store.manifest("genselect", gs_key)["rows"] > 0


@pytest.mark.parametrize("fresh", [False, True], ids=["reuse", "fresh"])
def test_a_rate_limited_server_costs_no_answer_and_a_stubborn_row_only_itself(tmp_path, shared_prefect, fresh):
    """A server that takes 2 requests at once, then 4, and answers 429 past that, with max_concurrency 64:
    the build succeeds and asks for each answer once. One sample is refused on its first three tries: the
    stage's first try ends with that row missing and every other kept; the build's retry of the stage asks
    for that sample alone, also in a build that reuses nothing (``--fresh``: that is about earlier builds).
    The stage's recorded wall time covers both tries."""
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps({"question": f"What is {i} + {2 * i}?", "answer": str(3 * i)}) + "\n"
                                for i in range(1, 9)))
    stubborn, sent = [], []

    def script(n, body):
        sent.append(time.time())
        if "What is 3 + 6?" in body["messages"][0]["content"] and body["seed"] % 4 == 1:
            stubborn.append(n)
            if len(stubborn) <= 3:
                return 429, {"Retry-After": "0"}, {"error": "busy"}
        return solver(n, body)

    with LimitedServer(2, delay_s=0.02, at_answers={16: 4}, script=script) as server:
        recipe = tmp_path / "recipe.yaml"
        recipe.write_text(f"""
name: limited
problems: {{name: toy, source: {{path: problems.jsonl}}}}
teachers:
  - {{name: served, engine: openai, model: m, base_url: "{server.url}", api_key_env: null, n: 4,
     max_tokens: 64, shard_problems: 4, max_concurrency: 64, max_retries: 2}}
export: {{name: toy-limited}}
""")
        result = CliRunner().invoke(app, ["run", str(recipe), "--store", str(tmp_path / "store")]
                                    + ["--fresh"] * fresh)
        assert result.exit_code == 0, result.output
    assert server.answered == 8 * 4 and len(stubborn) == 4  # each answer asked for once; the stubborn one 3 + 1
    store = StageStore(tmp_path / "store")
    run = store.run()
    (key,) = run["stages"]["candidates"]
    man = store.manifest("candidates", key)
    assert man["rows"] == 8 * 4 and man.counts() == (1, 31)  # the retry computed one row, kept the others
    assert man.timings["wall_s"] >= sent[-1] - sent[0]  # both tries, not only the last
    window = run["windows"]["candidates[served]"]
    assert window["ceiling"] == 64 and max(size for _, size in window["history"]) >= 2
