"""`bonforge run` with a sampled teacher: the openai engine against a real local server samples, then
verification, stats, GenSelect and export run on the new candidates; a second run reuses every stage."""

from __future__ import annotations

import json

import pytest

from golden_keys import assert_golden
from llm_server import ScriptedServer, adder
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
