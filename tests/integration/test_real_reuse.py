"""Row reuse with a real model: `recipes/gsm8k-smollm2.yaml` (SmolLM2-135M in vLLM on CPU) built with
`problems.limit=8`, then `=9` in the same store, samples exactly the 8 samples of the new problem; the 64
others are taken from the first build, unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from bonforge.config import load_recipe
from bonforge.flows.build import build
from bonforge.storage.store import StageStore

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
pytestmark = pytest.mark.slow
LABEL = "candidates[smollm2-135m]"


def test_one_more_problem_samples_only_its_8_samples(tmp_path, smollm2, data_dir):
    pytest.importorskip("vllm")
    store = StageStore(tmp_path / "store")
    short = "teachers.smollm2-135m.max_tokens=64"  # the recipe's 256 tokens, shortened to keep the test minutes

    def run(limit: int) -> dict:
        recipe = load_recipe(RECIPES / "gsm8k-smollm2.yaml", [f"problems.limit={limit}", short])
        return build(recipe, str(store.root), str(RECIPES))

    first, second = run(8), run(9)
    assert first["rows"][LABEL] == {"computed": 64, "reused": 0}
    assert second["rows"][LABEL] == {"computed": 8, "reused": 64}
    (key,) = second["stages"]["candidates"]
    man = store.manifest("candidates", key)
    assert man["rows"] == 72 and man["throughput"]["completion_tokens"] > 0  # only the new problem's tokens
    before = {r["candidate_id"]: r["text"] for r in store.read("candidates", first["stages"]["candidates"][0])
              .to_pylist()}
    after = {r["candidate_id"]: r["text"] for r in store.read("candidates", key).to_pylist()}
    assert {c: after[c] for c in before} == before and len(set(after) - set(before)) == 8
