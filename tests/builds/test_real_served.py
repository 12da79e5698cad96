"""The `openai` engine against a real vLLM server (SmolLM2-135M on CPU, started once per session): sampling,
a prompt too long for the server's window, and SmolLM2 as the selector of `bonforge eval-selector` and as
the FusioN fusor on a small pool. A 135M model rarely follows the output contracts: the tests print the
parse rates and assert only what holds for any model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from real_models import Kept, chat, check_samples, problems, texts
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.config import load_recipe
from bonforge.flows.build import build
from bonforge.llm.config import OpenAITeacher
from bonforge.storage.store import StageStore
from sampling import sample_stage

REPO = Path(__file__).resolve().parents[2]
FUSION = REPO / "recipes" / "gsm8k-fusion.yaml"
MAX_TOKENS = 16
PROBLEMS = 6
pytestmark = pytest.mark.slow


def teacher(url: str, **kw) -> OpenAITeacher:
    base = dict(engine="openai", name="served", model="smollm2-135m-instruct", base_url=url, api_key_env=None,
                n=3, temperature=1.0, top_p=0.95, max_tokens=MAX_TOKENS, max_retries=0, shard_problems=2)
    return OpenAITeacher(**{**base, **kw})


def test_samples_are_seeded_reproducible_and_counted(vllm_server):
    from bonforge.llm.openai import OpenAIEngine

    engine = OpenAIEngine(teacher(vllm_server))
    reqs = [chat("a", "What is 2 + 3?", n=4, seed=100), chat("b", "Name a fruit.", n=3, seed=7)]
    first = engine.generate(reqs)
    check_samples(first, reqs, MAX_TOKENS)
    assert texts(engine.generate(reqs)) == texts(first)
    assert texts(engine.generate([chat("a", "What is 2 + 3?", n=4, seed=500)])) != texts(first[:1])


def test_stage_skips_and_reports_a_prompt_too_long_for_the_window(vllm_server, tmp_path):
    from bonforge.llm.openai import OpenAIEngine

    t = teacher(vllm_server)
    engine = Kept(OpenAIEngine(t))
    man = sample_stage(StageStore(tmp_path), problems(3, long=True), t, engine=engine)
    assert man["rows"] == 3 * t.n and man["skipped_requests"] == 1
    assert man["problems_short_of_n"] == ["real/long"]
    assert man["engine"] == "openai" and man["tokens"]["completion"] > 0


@pytest.fixture(scope="module")
def fusion_build(vllm_server, tmp_path_factory, gsm8k_pool, shared_prefect):
    """The FusioN recipe on 6 GSM8K problems, the served SmolLM2 as fusor (32 tokens per answer); the build's
    GenSelect prompts (one per kept problem: 2 of the 6) are the selector's. Every call prefills a prompt of
    four solutions on the CPU: the counts are kept small. The build uses the session's Prefect server (its own
    start is what tests/services covers)."""
    import ray

    root = tmp_path_factory.mktemp("store")
    sets = [f"problems.limit={PROBLEMS}", f"fusion.fusor.base_url={vllm_server}",
            "fusion.fusor.model=smollm2-135m-instruct", "fusion.fusor.max_tokens=32", "genselect.max_candidates=4",
            "genselect.prompts_per_problem=1"]
    record = build(load_recipe(FUSION, sets), str(root), str(FUSION.parent))
    ray.shutdown()
    yield StageStore(root), record, sets


def test_fusor_on_a_small_pool(fusion_build):
    store, record, _ = fusion_build
    (key,) = record["stages"]["fusion"]
    rows = store.read("fusion", key).to_pylist()
    comp = store.manifest("fusion", key)["comparison"]
    assert comp["problems"] == len(rows) == PROBLEMS
    for r in rows:
        assert sum(dict(r["teacher_chars"]).values()) == r["total_chars"]
    fused = [k for k in record["stages"]["verdicts"] if store.manifest("verdicts", k).get("teacher") == "fusor"]
    statuses = [s for k in fused for s in store.read("verdicts", k).column("status").to_pylist()]
    answered = sum(s != "no_answer" for s in statuses)
    print(f"\nFusioN with SmolLM2-135M: {answered}/{len(statuses)} fused answers had an extractable answer, "
          f"fused accuracy {comp['fused']:.2f} vs oracle {comp['oracle_pass_at_n']:.2f}")
    assert len(statuses) == PROBLEMS and 0 <= comp["fused"] <= comp["oracle_pass_at_n"]


def test_eval_selector_with_smollm2(fusion_build, vllm_server, tmp_path):
    store, _, sets = fusion_build
    spec = tmp_path / "selector.yaml"
    spec.write_text(json.dumps({"engine": "openai", "model": "smollm2-135m-instruct", "base_url": vllm_server,
                                "api_key_env": None, "temperature": 0.6, "max_tokens": 32}))
    args = ["eval-selector", str(FUSION), "--selector", str(spec), "--runs", "2", "--store", str(store.root)]
    res = CliRunner().invoke(app, args + [a for s in sets for a in ("--set", s)])
    assert res.exit_code == 0, res.output
    s = store.run()["summary"]
    print(f"\nGenSelect with SmolLM2-135M as selector: {s['calls'] - s['unparsed']}/{s['calls']} judgments parsed, "
          f"accuracy {s['selector']:.2f} (pass@1 {s['pass@1']:.2f}, pass@N {s['pass@N']:.2f})")
    assert s["prompts"] > 0 and s["calls"] == 2 * s["prompts"] and 0 <= s["unparsed"] <= s["calls"]
    assert f"{s['unparsed']} unparsed" in res.output
