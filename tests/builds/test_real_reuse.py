"""Row reuse with a real model: `recipes/gsm8k-smollm2.yaml` (SmolLM2-135M in vLLM on CPU) built with
`problems.limit=8`, then `=9` in the same store, samples exactly the 8 samples of the new problem; the 64
others are taken from the first build, unchanged. One vLLM engine (the session's, ``smol_vllm``) serves both
builds (as a notebook running two builds would keep it), so the model loads once and the engine counts what each
build asked of it."""

from __future__ import annotations

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
def engine(smol_vllm, monkeypatch):
    """The session's vLLM engine (its window and dtype are the recipe's teacher's), which both builds' sampling
    stages get for the recipe's teacher (their `close` keeps it)."""
    import bonforge.llm

    (teacher,) = recipe(8).teachers
    kept, make = Kept(smol_vllm), bonforge.llm.make_engine
    monkeypatch.setattr(bonforge.llm, "make_engine", lambda t: kept if t == teacher else make(t))
    return kept


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
