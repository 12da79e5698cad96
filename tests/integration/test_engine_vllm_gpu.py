"""The vllm engine for real (GPU only): set BONFORGE_VLLM_MODEL to a local model directory."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from bonforge.llm.config import VLLMTeacher
from bonforge.schema import PROBLEMS
from bonforge.storage.store import StageStore
from sampling import sample_stage

pytestmark = pytest.mark.gpu


def test_vllm_stage_samples_and_skips_long_prompts(tmp_path):
    pytest.importorskip("vllm")
    model = os.environ.get("BONFORGE_VLLM_MODEL")
    if not model:
        pytest.skip("set BONFORGE_VLLM_MODEL to a local model directory")
    rows = [{"problem_id": f"g/{i}", "source": "g", "domain": "math", "question": f"What is {i} + {i}?"}
            for i in range(4)]
    rows.append({"problem_id": "g/long", "source": "g", "domain": "math", "question": "word " * 3000})
    teacher = VLLMTeacher(engine="vllm", name="v", model=model, n=2, max_tokens=64, max_model_len=1024,
                          gpu_memory_utilization=0.5)
    man = sample_stage(StageStore(tmp_path), pa.Table.from_pylist(rows, schema=PROBLEMS), teacher)
    assert man["rows"] == 8 and man["skipped_requests"] == 1 and man["problems_short_of_n"] == ["g/long"]
    assert man["tokens"]["completion"] > 0
