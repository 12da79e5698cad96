"""Exact early stopping with a real model: SmolLM2-135M in vLLM on CPU, on easy sums it often gets right. The same
recipe built with and without ``filter.early_stop`` publishes the same datasets, and the early-stopping build
asks the engine for exactly the samples that drawing one at a time would (computed from the full build's
verdicts: sample k of a problem is the same text in either build). One engine serves both builds, then the
smoke run of ``benchmarks/early_stop.py`` (``bench_smoke``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import bench_smoke
import pytest
from crash_build import LocalRun
from real_models import Kept

from bonforge.config import load_recipe
from bonforge.engine.run import execute
from bonforge.flows.build import dag
from bonforge.storage.store import StageStore

pytestmark = pytest.mark.slow
N, MAX_PASS_RATE = 8, 0.25  # a problem with 3 of 8 right is too easy: SmolLM2 gets there on the easiest sums
SUMS = [(2, 3), (1, 1), (4, 4), (10, 5), (3, 6), (7, 8), (12, 9), (25, 17)]


def write(folder: Path) -> Path:
    rows = [{"id": f"s{i}", "question": f"What is {a} + {b}? Answer with the number in \\boxed{{}}.",
             "answer": str(a + b)} for i, (a, b) in enumerate(SUMS)]
    (folder / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = folder / "recipe.yaml"
    path.write_text(f"""
name: sums-smollm2
problems: {{name: sums, source: {{path: sums.jsonl}}, fields: {{id: id}}}}
teachers:
  - {{name: smol, engine: vllm, model: smollm2-135m-instruct, device: cpu, dtype: float32, max_model_len: 2048,
     n: {N}, temperature: 0.7, top_p: 0.95, max_tokens: 48, shard_problems: 8}}
filter: {{max_pass_rate: {MAX_PASS_RATE}}}
export: {{name: sums-genselect, allow_empty: true, rl: {{name: sums-rl}}}}
""")
    return path


@pytest.fixture(scope="module")
def engine(vllm_cpu, tmp_path_factory):
    """The recipe's teacher in one real vLLM engine that the module's builds' sampling stages get (their `close`
    keeps it); its replica reserves half of a local Ray of twice the cores, so verification finds CPUs beside it."""
    import ray

    import bonforge.llm
    from bonforge.llm.vllm_engine import VLLMEngine
    from bonforge.runtime.cluster import ensure_ray

    cores = os.cpu_count() or 1
    ensure_ray(num_cpus=2 * cores)
    assert ray.cluster_resources()["CPU"] > cores, "Ray was up already, with no CPU beside the replica's"
    (teacher,) = load_recipe(write(tmp_path_factory.mktemp("recipe"))).teachers
    real = VLLMEngine(teacher.model_copy(update={"cpus_per_replica": cores}))
    real.start()
    kept, make = Kept(real), bonforge.llm.make_engine
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bonforge.llm, "make_engine", lambda t: kept if t.name == teacher.name else make(t))
        yield kept
    real.close()


def build(store: Path, recipe: Path, *sets: str) -> dict:
    r = load_recipe(str(recipe), list(sets))
    return execute(dag, LocalRun(StageStore(store), r), str(recipe.parent), None, record_start=True).json()


def contents(store: Path, record: dict) -> list[str]:
    return [json.loads((store / record[k] / "manifest.json").read_text())["content_sha256"]
            for k in ("dataset", "rl_dataset")]


def one_at_a_time(verdicts: list[dict]) -> int:
    """The samples drawn one at a time in index order, each problem stopped once more than MAX_PASS_RATE of its
    N samples are right."""
    by_problem: dict[str, dict[int, bool]] = {}
    for v in verdicts:
        by_problem.setdefault(v["problem_id"], {})[int(v["candidate_id"].rsplit("/", 1)[1])] = v["correct"]
    total = 0
    for samples in by_problem.values():
        ok, drawn = 0, N
        for k in range(N):
            ok += samples[k]
            if ok / N > MAX_PASS_RATE:
                drawn = k + 1
                break
        total += drawn
    return total


def test_early_stop_with_real_vllm_is_exact(tmp_path, engine):
    recipe, asked = write(tmp_path), len(engine.requests)
    full = build(tmp_path / "full", recipe, "filter.early_stop=false")
    assert sum(r.n for r in engine.requests[asked:]) == len(SUMS) * N
    (key,) = full["stages"]["verdicts"]
    want = one_at_a_time(StageStore(tmp_path / "full").read("verdicts", key).to_pylist())
    assert want < len(SUMS) * N, "no problem stopped early: the sums are too hard for the model"

    asked = len(engine.requests)
    early = build(tmp_path / "early", recipe, "filter.early_stop=true")
    assert sum(r.n for r in engine.requests[asked:]) == want
    assert contents(tmp_path / "early", early) == contents(tmp_path / "full", full)
    (stats,) = early["stages"]["problem_stats"]
    rows = [r for r in StageStore(tmp_path / "early").read("problem_stats", stats).to_pylist() if r["teacher"] == "*"]
    assert any(r["stopped_early"] and r["drop_reason"] == "too_easy" and r["n"] < N for r in rows)


def test_the_benchmark_runs_on_this_engine(engine, tmp_path, capsys):
    """``benchmarks/early_stop.py``'s smoke run: the pools, then its two builds on this module's engine (the
    script's own start would load the model again); no figure asserted."""
    code = bench_smoke.load("early_stop").main(bench_smoke.argv("early_stop", tmp_path), engine=engine)
    out = capsys.readouterr().out
    assert code == 0 and bench_smoke.unprinted("early_stop", out) == [], out
