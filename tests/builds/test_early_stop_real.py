"""Exact early stopping with a real model: SmolLM2-135M in vLLM on CPU, and in the transformers engine (which
early stopping takes with ``batch_size: 1`` only), on easy sums it often gets right. The same recipe built with
and without ``filter.early_stop`` publishes the same datasets, and the early-stopping build asks the engine for
exactly the samples that drawing one at a time would (computed from the full build's verdicts: sample k of a
problem is the same text in either build). The session's vLLM engine (``smol_vllm``) serves the module: both
builds, then the smoke run of ``benchmarks/early_stop.py`` (``bench_smoke``). The transformers case comes first:
it runs while that engine loads (``tests/conftest.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import bench_smoke
import pytest
from crash_build import build, contents
from real_models import Kept

from bonforge.config import load_recipe
from bonforge.storage.store import StageStore

pytestmark = pytest.mark.slow
N, MAX_PASS_RATE = 8, 0.25  # a problem with 3 of 8 right is too easy: SmolLM2 gets there on the easiest sums
SUMS = [(2, 3), (1, 1), (4, 4), (10, 5), (3, 6), (7, 8), (12, 9), (25, 17)]


VLLM = "engine: vllm, device: cpu, dtype: float32, max_model_len: 2048, shard_problems: 8"
LOCAL = "engine: transformers, dtype: float32, batch_size: 1"
# each sample alone is slower: a smaller build (a problem stops at 2 of 4 right; SmolLM2 gets 10 + 5 right at most once)
LOCAL_N, LOCAL_SUMS, LOCAL_TOKENS = 4, SUMS[:4], 24


def write(folder: Path, engine: str = VLLM, n: int = N, sums: list = SUMS, max_tokens: int = 48) -> Path:
    rows = [{"id": f"s{i}", "question": f"What is {a} + {b}? Answer with the number in \\boxed{{}}.",
             "answer": str(a + b)} for i, (a, b) in enumerate(sums)]
    (folder / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = folder / "recipe.yaml"
    path.write_text(f"""
name: sums-smollm2
problems: {{name: sums, source: {{path: sums.jsonl}}, fields: {{id: id}}}}
teachers:
  - {{name: smol, model: smollm2-135m-instruct, {engine}, n: {n}, temperature: 0.7, top_p: 0.95,
     max_tokens: {max_tokens}}}
filter: {{max_pass_rate: {MAX_PASS_RATE}}}
export: {{name: sums-genselect, allow_empty: true, rl: {{name: sums-rl}}}}
""")
    return path


@pytest.fixture(scope="module")
def engine(smol_vllm, tmp_path_factory):
    """The session's vLLM engine (its window and dtype are the recipe's teacher's), which the module's builds'
    sampling stages get for the recipe's teacher (their `close` keeps it)."""
    import bonforge.llm

    (teacher,) = load_recipe(write(tmp_path_factory.mktemp("recipe"))).teachers
    kept, make = Kept(smol_vllm), bonforge.llm.make_engine
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bonforge.llm, "make_engine", lambda t: kept if t.name == teacher.name else make(t))
        yield kept


def one_at_a_time(verdicts: list[dict], n: int = N) -> int:
    """The samples drawn one at a time in index order, each problem stopped once more than MAX_PASS_RATE of its
    n samples are right."""
    by_problem: dict[str, dict[int, bool]] = {}
    for v in verdicts:
        by_problem.setdefault(v["problem_id"], {})[int(v["candidate_id"].rsplit("/", 1)[1])] = v["correct"]
    total = 0
    for samples in by_problem.values():
        ok, drawn = 0, n
        for k in range(n):
            ok += samples[k]
            if ok / n > MAX_PASS_RATE:
                drawn = k + 1
                break
        total += drawn
    return total


def test_early_stop_with_real_transformers_is_exact(tmp_path, smollm2, monkeypatch, request):
    """Each sample generated alone (``batch_size: 1``): its computation has the same shapes in any round. On one
    torch thread: two waited on each other on a loaded machine (the same 4 samples took 5-32 s, one thread 7 s)."""
    import torch

    import bonforge.llm
    from bonforge.llm.transformers_engine import TransformersEngine

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    request.addfinalizer(lambda: torch.set_num_threads(threads))

    (teacher,) = load_recipe(write(tmp_path, LOCAL, LOCAL_N, LOCAL_SUMS, LOCAL_TOKENS)).teachers
    real = TransformersEngine(teacher)
    kept, make = Kept(real), bonforge.llm.make_engine
    monkeypatch.setattr(bonforge.llm, "make_engine", lambda t: kept if t.name == teacher.name else make(t))
    check_exact(tmp_path, kept, LOCAL_N, LOCAL_SUMS)


def test_early_stop_with_real_vllm_is_exact(tmp_path, engine):
    write(tmp_path)
    check_exact(tmp_path, engine, N, SUMS)


def test_the_benchmark_runs_on_this_engine(engine, tmp_path, capsys):
    """``benchmarks/early_stop.py``'s smoke run: the pools, then its two builds on this module's engine (the
    script's own start would load the model again); no figure asserted."""
    code = bench_smoke.load("early_stop").main(bench_smoke.argv("early_stop", tmp_path), engine=engine)
    out = capsys.readouterr().out
    assert code == 0 and bench_smoke.unprinted("early_stop", out) == [], out


def check_exact(tmp_path: Path, engine: Kept, n: int, sums: list) -> None:
    recipe, first = tmp_path / "recipe.yaml", len(engine.requests)  # the recipe written by the test
    full = build(tmp_path / "full", recipe, "filter.early_stop=false")
    assert sum(r.n for r in engine.requests[first:]) == len(sums) * n
    (key,) = full["stages"]["verdicts"]
    want = one_at_a_time(StageStore(tmp_path / "full").read("verdicts", key).to_pylist(), n)
    assert want < len(sums) * n, "no problem stopped early: the sums are too hard for the model"

    asked = len(engine.requests)
    early = build(tmp_path / "early", recipe, "filter.early_stop=true")
    assert sum(r.n for r in engine.requests[asked:]) == want
    assert contents(tmp_path / "early", early) == contents(tmp_path / "full", full)
    (stats,) = early["stages"]["problem_stats"]
    rows = [r for r in StageStore(tmp_path / "early").read("problem_stats", stats).to_pylist() if r["teacher"] == "*"]
    assert any(r["stopped_early"] and r["drop_reason"] == "too_easy" and r["n"] < n for r in rows)
