"""`bonforge eval-selector` end to end: a real GSM8K build, then a real local OpenAI-compatible server
scripted to answer `Judgment: k` (or nothing parseable) judges its GenSelect prompts over several seeds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from golden_keys import assert_golden
from llm_server import ScriptedServer, answer
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.config import load_recipe
from bonforge.flows.build import build
from bonforge.storage.store import StageStore

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "gsm8k-genselect.yaml"
LIMIT = ["--set", "problems.limit=300"]
RUNS = 3
pytestmark = pytest.mark.slow  # Prefect + Ray start-up


def reply_text(body: dict) -> str:
    """By seed: a judgment whose last line wins, no judgment, or an index out of range."""
    n = body["messages"][0]["content"].count("### Candidate ")
    seed = body["seed"]
    return {0: f"Candidate 1 looks fine.\nJudgment: 1\nOn reflection:\nJudgment: {seed % n}",
            1: "I cannot decide.", 2: f"Judgment: {n}"}[seed % 3]


def expected_judgment(body: dict) -> int | None:
    n = body["messages"][0]["content"].count("### Candidate ")
    return body["seed"] % n if body["seed"] % 3 == 0 else None


def judge(n: int, body: dict):
    reply = answer(body)
    reply["choices"][0]["message"]["content"] = reply_text(body)
    return 200, {}, reply


@pytest.fixture(scope="module")
def store(tmp_path_factory, gsm8k_pool, shared_prefect):
    import ray

    root = tmp_path_factory.mktemp("store")
    build(load_recipe(RECIPE, LIMIT[1:]), str(root), str(RECIPE.parent))
    yield StageStore(root)
    ray.shutdown()


def evaluate(store: StageStore, url: str, *extra: str):
    return CliRunner().invoke(app, ["eval-selector", str(RECIPE), "--selector", f"openai:judge-model@{url}",
                                    "--runs", str(RUNS), "--store", str(store.root), *LIMIT, *extra])


def sql(store: StageStore, query: str) -> list[dict]:
    res = CliRunner().invoke(app, ["sql", query, "--store", str(store.root), "--format", "json"])
    assert res.exit_code == 0, res.output
    return [json.loads(line) for line in res.output.splitlines() if line.strip()]


def test_selector_on_genselect_prompts(store):
    with ScriptedServer(judge) as server:
        res = evaluate(store, server.url)
        assert res.exit_code == 0, res.output
        again = evaluate(store, server.url)  # the stage is committed: nothing is asked again
        assert again.exit_code == 0, again.output
    prompts = sql(store, "SELECT prompt_id, n_candidates, correct_indices FROM genselect")
    assert prompts and server.count == len(prompts) * RUNS
    # Table 1 layout, printed
    for column in ("prompts", "pass@1", "majority@N", "pass@N", "selector", "+ random fallback", "±"):
        assert column in res.output
    # every row agrees with what the server was scripted to say
    sent = {(b["messages"][0]["content"], b["seed"]): expected_judgment(b) for b in server.bodies}
    text = {r["prompt_id"]: r["prompt"] for r in sql(store, "SELECT prompt_id, prompt FROM genselect")}
    rows = sql(store, "SELECT * FROM selector_eval ORDER BY prompt_id, run")
    assert len(rows) == len(prompts) * RUNS and sorted({r["run"] for r in rows}) == list(range(RUNS))
    for r in rows:
        want = sent[(text[r["prompt_id"]], r["seed"])]
        assert r["judgment"] == want and r["parsed"] == (want is not None) and not r["skipped"]
        assert r["correct"] == (want is not None and want in r["correct_indices"])
        assert 0 <= r["fallback_index"] < r["n_candidates"]
        assert r["fallback_correct"] == (r["fallback_index"] in r["correct_indices"])
        if want is not None:
            assert r["fallback_index"] == want
    assert len({(r["prompt_id"], r["seed"]) for r in rows}) == len(rows)  # each run its own seed
    # the printed numbers are the stage's numbers
    unparsed = sum(not r["parsed"] for r in rows)
    assert 0 < unparsed < len(rows) and f"{unparsed} unparsed" in res.output
    run = store.run()
    assert run["kind"] == "eval-selector" and "selector_eval" in run["stages"]
    assert_golden("gsm8k-300-selector-eval", run)
    s = run["summary"]
    pass1 = sum(len(p["correct_indices"]) / p["n_candidates"] for p in prompts) / len(prompts)
    assert s["pass@1"] == pytest.approx(pass1) and s["pass@N"] == 1.0 and 0 <= s["majority@N"] <= 1
    per_run = [sum(r["correct"] for r in rows if r["run"] == k) / len(prompts) for k in range(RUNS)]
    assert s["selector"] == pytest.approx(sum(per_run) / RUNS)
    assert f"{100 * s['selector']:.1f} ± {100 * s['selector_std']:.1f}" in res.output
    assert s["skipped_prompts"] == 0  # GenSelect prompts mix right and wrong answers: never unanimous
    # the report of the evaluation run shows the selector beside the build's plots
    page = Path(CliRunner().invoke(app, ["report", "--store", str(store.root)]).output.strip()).read_text()
    assert f'<section id="selector_eval" data-rows="{RUNS}">' in page


def test_skip_when_unanimous_on_the_whole_pool(store):
    with ScriptedServer(judge) as server:
        res = evaluate(store, server.url, "--prompts", "pool", "--skip-unanimous")
    assert res.exit_code == 0, res.output
    rows = sql(store, "SELECT prompt_id, run, skipped, answer_groups, judgment, correct, correct_indices, "
                      "prompt_n_tokens FROM selector_eval")
    prompts = {r["prompt_id"] for r in rows}
    assert 250 < len(prompts) <= 300  # one prompt per problem with at least two reliable candidates
    unanimous = {r["prompt_id"] for r in rows if len(set(r["answer_groups"])) == 1 and r["answer_groups"][0] >= 0}
    assert unanimous and {r["prompt_id"] for r in rows if r["skipped"]} == unanimous
    assert server.count == (len(prompts) - len(unanimous)) * RUNS
    for r in rows:
        if r["skipped"]:  # all or none right: candidate 0 stands for the group
            assert r["judgment"] is None and r["correct"] == (r["correct_indices"][:1] == [0])
    assert_golden("gsm8k-300-selector-eval-pool", store.run())
    s = store.run()["summary"]
    saved = sum(r["prompt_n_tokens"] for r in rows if r["skipped"]) / sum(r["prompt_n_tokens"] for r in rows)
    assert s["skipped_prompts"] == len(unanimous) and s["compute_saved"] == pytest.approx(saved)
    assert re.search(rf"skipped as unanimous: {len(unanimous)} prompts \({len(unanimous) * RUNS} calls\)", res.output)
    assert s["pass@N"] < 1.0  # the unfiltered pool has problems no candidate solves


def test_errors_name_the_option_and_the_run(store, tmp_path):
    res = CliRunner().invoke(app, ["eval-selector", str(RECIPE), "--selector", "gpt-4o", "--store", str(store.root)])
    assert res.exit_code == 2 and "--selector 'gpt-4o': expected ENGINE:MODEL[@BASE_URL]" in res.output
    bad = tmp_path / "sel.yaml"
    bad.write_text("engine: openai\nmodel: m\ntemperatur: 0.1\n")
    res = CliRunner().invoke(app, ["eval-selector", str(RECIPE), "--selector", str(bad), "--store", str(store.root)])
    assert res.exit_code == 2 and "openai.temperatur: Extra inputs are not permitted" in res.output
    res = CliRunner().invoke(app, ["eval-selector", str(RECIPE), "--selector", "openai:m@http://127.0.0.1:9/v1",
                                   "--set", "filter.max_pass_rate=0.9", "--store", str(store.root)])
    assert res.exit_code == 2 and "no succeeded run of recipe 'gsm8k-genselect' with these settings" in res.output
