"""`bonforge plan`: on GSM8K problems with a sampled teacher served by a scripted server whose answer lengths
are known, the plan after a pilot build is within 15 % of what the build then spends, asks the server for
nothing, and counts the pilot's samples as reused; without a pilot it gives the worst case only."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from crash_build import build
from llm_server import ScriptedServer, answer
from typer.testing import CliRunner

from bonforge.cli import app

PROBLEMS, PILOT, N = 16, 4, 8
IN, OUT = 2.0, 10.0


def gsm8k(tmp_path: Path) -> dict[str, str]:
    """The first GSM8K problems beside the recipe; question -> its final answer."""
    source = Path(os.environ["BONFORGE_DATA"]) / "gsm8k" / "example_model_solutions.jsonl"
    lines = source.read_text().splitlines()[:PROBLEMS]
    (tmp_path / "problems.jsonl").write_text("\n".join(lines) + "\n")
    return {(r := json.loads(line))["question"]: r["ground_truth"].rsplit("A:", 1)[1].strip() for line in lines}


def length(seed: int) -> int:
    return 30 + seed % 50  # what the scripted teacher writes: 30 to 79 tokens, known from the seed


def server_for(gold: dict[str, str]) -> ScriptedServer:
    def script(n: int, body: dict):
        question = re.search(r"\n\n(.*)\n", body["messages"][0]["content"], re.S).group(1)
        right = gold[question] if body["seed"] % 4 == 0 else f"{gold[question]}1"
        reply = answer(body)
        reply["choices"][0]["message"]["content"] = " ".join(["step"] * (length(body["seed"]) - 2)) + f"\nA: {right}"
        reply["usage"]["completion_tokens"] = length(body["seed"])
        return 200, {}, reply

    return ScriptedServer(script)


def recipe(tmp_path: Path, url: str, extra: str = "") -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(f"""
name: gsm8k-planned
problems: {{name: gsm8k, source: {{path: problems.jsonl}}, fields: {{question: question, answer: ground_truth}}}}
teachers:
  - {{name: served, engine: openai, model: m, base_url: "{url}", api_key_env: null, n: {N}, max_tokens: 256,
     max_retries: 0, prices: {{input: {IN}, output: {OUT}}}}}{extra}
verify: {{math: {{patterns: ['(?m)^A:\\s*(.+?)\\s*$']}}}}
export: {{name: gsm8k-planned}}
""")
    return path


def plan_of(path: Path, store: Path, *sets: str) -> dict:
    said = CliRunner().invoke(app, ["plan", str(path), "--store", str(store), "--json",
                                    *(x for s in sets for x in ("--set", s))])
    assert said.exit_code == 0, said.output
    return json.loads(said.output)


def test_the_plan_after_a_pilot_is_within_15_percent_of_what_the_build_spends(tmp_path):
    gold = gsm8k(tmp_path)
    store = tmp_path / "store"
    with server_for(gold) as server:
        path = recipe(tmp_path, server.url)
        blind = plan_of(path, store)
        pilot = build(store, path, f"problems.limit={PILOT}")
        asked = server.count
        planned = plan_of(path, store)
        assert server.count == asked  # planning asks the server for nothing
        full = build(store, path)
    (t,) = planned["teachers"]
    assert (t["rows"], t["reused"], t["requests"]) == (PROBLEMS * N, PILOT * N, (PROBLEMS - PILOT) * N)
    assert t["saved_usd"] == pytest.approx(pilot["build_summary"]["cost"]["rows_usd"])
    spent = full["build_summary"]["cost"]["spent_usd"]
    assert spent > 0 and abs(planned["expected_usd"] - spent) <= 0.15 * spent, (planned, spent)
    assert planned["low_usd"] <= spent <= planned["high_usd"]
    assert t["output_tokens"]["observed_min"] >= 30 and t["output_tokens"]["observed_max"] <= 79
    # the control: with nothing observed, only the worst case (every answer max_tokens long) is known
    (b,) = blind["teachers"]
    assert blind["expected_usd"] is None and b["reused"] == 0 and b["prompt_tokens_counted_by"] == "estimate"
    assert blind["high_usd"] >= spent / (PROBLEMS - PILOT) * PROBLEMS


def test_the_plan_in_words_and_without_prices(tmp_path):
    gsm8k(tmp_path)
    path = recipe(tmp_path, "http://127.0.0.1:9/v1")  # nothing listens: a plan calls no endpoint
    said = CliRunner().invoke(app, ["plan", str(path), "--store", str(tmp_path / "store")])
    assert said.exit_code == 0, said.output
    assert f"{PROBLEMS * N} samples, 0 reused, {PROBLEMS * N} to request" in said.output
    assert "none observed yet, at most 256" in said.output and "total: $0.0" in said.output
    unpriced = plan_of(path, tmp_path / "store", "teachers.0.prices=null")
    assert unpriced["high_usd"] is None


def test_a_teacher_without_prices_is_named_as_left_out_of_the_total(tmp_path):
    """The total summed the priced teachers and said nothing of a teacher with 4,000 samples and no prices (it
    read as free); reusing nothing saved "unknown". The control: the priced teacher alone, nothing left out."""
    gsm8k(tmp_path)
    path = recipe(tmp_path, "http://127.0.0.1:9/v1", """
  - {name: unpriced, engine: openai, model: m2, base_url: "http://127.0.0.1:9/v1", api_key_env: null, n: 4}""")
    said = CliRunner().invoke(app, ["plan", str(path), "--store", str(tmp_path / "store")])
    assert said.exit_code == 0, said.output
    assert said.output.splitlines()[-1].endswith("; not counted: unpriced (no prices stated)"), said.output
    both = plan_of(path, tmp_path / "store")
    served, unpriced = both["teachers"]
    assert both["unpriced_teachers"] == ["unpriced"] and unpriced["high_usd"] is None
    assert both["high_usd"] == served["high_usd"] and served["saved_usd"] == 0.0 == both["saved_usd"]
    alone = plan_of(recipe(tmp_path, "http://127.0.0.1:9/v1"), tmp_path / "store")
    assert alone["unpriced_teachers"] == [] and alone["high_usd"] == served["high_usd"]
