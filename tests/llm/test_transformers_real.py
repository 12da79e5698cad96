"""The `transformers` engine on the real SmolLM2-135M (the recipe names it; the prepared directory is
loaded): the same assertions as the vLLM engines."""

from __future__ import annotations

import pytest
from real_models import Kept, chat, check_samples, problems, texts

from bonforge.llm.config import TransformersTeacher
from bonforge.storage.store import StageStore
from sampling import sample_stage

MAX_TOKENS = 16
pytestmark = pytest.mark.slow


def teacher(**kw) -> TransformersTeacher:
    base = dict(engine="transformers", name="smol", model="smollm2-135m-instruct", dtype="float32", n=3,
                temperature=1.0, top_p=0.95, max_tokens=MAX_TOKENS, batch_size=8, shard_problems=2)
    return TransformersTeacher(**{**base, **kw})


@pytest.fixture(scope="module")
def engine(smollm2):
    from bonforge.llm.transformers_engine import TransformersEngine

    real = TransformersEngine(teacher())
    real.start()
    yield Kept(real)
    real.close()


def test_samples_are_seeded_reproducible_and_counted(engine):
    reqs = [chat("a", "What is 2 + 3?", n=4, seed=100), chat("b", "Name a fruit.", n=3, seed=7)]
    first = engine.generate(reqs)
    check_samples(first, reqs, MAX_TOKENS)
    assert texts(engine.generate(reqs)) == texts(first)
    assert texts(engine.generate([chat("a", "What is 2 + 3?", n=4, seed=500)])) != texts(first[:1])


def test_stage_skips_and_reports_a_prompt_too_long_for_the_window(engine, tmp_path):
    t = teacher()
    man = sample_stage(StageStore(tmp_path), problems(3, long=True), t, engine=engine)
    assert man["rows"] == 3 * t.n and man["skipped_requests"] == 1
    assert man["problems_short_of_n"] == ["real/long"]
