"""Row reuse with a real model: `recipes/gsm8k-smollm2.yaml` (SmolLM2-135M in vLLM on CPU) built with
`problems.limit=8`, then `=9` in the same store, samples exactly the 8 samples of the new problem; the 64
others are taken from the first build, unchanged. One vLLM engine serves both builds (as a notebook running
two builds would keep it), so the model loads once and the engine counts what each build asked of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from real_models import Kept

from bonforge.config import load_recipe
from bonforge.flows.build import build
from bonforge.storage.store import StageStore

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
pytestmark = pytest.mark.slow
LABEL = "candidates[smollm2-135m]"
# the recipe's 256 tokens, shortened: 72 samples of 16 tokens (of 64: three quarters of the generation time
# went to tokens no assertion reads; reuse is decided per sample, whatever its length)
SHORT = "teachers.smollm2-135m.max_tokens=16"


def recipe(limit: int):
    return load_recipe(RECIPES / "gsm8k-smollm2.yaml", [f"problems.limit={limit}", SHORT])


@pytest.fixture
def engine(smollm2, monkeypatch):
    """The recipe's teacher in one real vLLM engine that both builds' sampling stages get (their `close` keeps
    it). Its replica computes on every core, like the recipe's, but reserves only half of the local Ray's
    (twice the cores, logically), so that the build's verification tasks find CPUs while it stays loaded."""
    pytest.importorskip("vllm")
    import ray

    import bonforge.llm
    from bonforge.runtime.cluster import ensure_ray
    from bonforge.llm.vllm_engine import VLLMEngine

    cores = os.cpu_count() or 1
    ensure_ray(num_cpus=2 * cores)
    assert ray.cluster_resources()["CPU"] > cores, "Ray was up already, with no CPU beside the replica's"
    (teacher,) = recipe(8).teachers
    real = VLLMEngine(teacher.model_copy(update={"cpus_per_replica": cores}))
    real.start()
    kept, make = Kept(real), bonforge.llm.make_engine
    monkeypatch.setattr(bonforge.llm, "make_engine", lambda t: kept if t == teacher else make(t))
    yield kept
    real.close()


def test_one_more_problem_samples_only_its_8_samples(tmp_path, engine, data_dir, shared_prefect):
    store = StageStore(tmp_path / "store")

    def run(limit: int) -> dict:
        return build(recipe(limit), str(store.root), str(RECIPES))

    first = run(8)
    assert sorted(r.n for r in engine.requests) == [8] * 8
    asked, second = len(engine.requests), run(9)
    (new,) = engine.requests[asked:]  # one request, for the new problem, of its 8 samples
    assert new.n == 8 and new.id not in {r.id for r in engine.requests[:asked]}
    assert first["rows"][LABEL] == {"computed": 64, "reused": 0}
    assert second["rows"][LABEL] == {"computed": 8, "reused": 64}
    (key,) = second["stages"]["candidates"]
    man = store.manifest("candidates", key)
    assert man["rows"] == 72 and man["throughput"]["completion_tokens"] > 0  # only the new problem's tokens
    before = {r["candidate_id"]: r["text"] for r in store.read("candidates", first["stages"]["candidates"][0])
              .to_pylist()}
    after = {r["candidate_id"]: r["text"] for r in store.read("candidates", key).to_pylist()}
    assert {c: after[c] for c in before} == before and len(set(after) - set(before)) == 8
