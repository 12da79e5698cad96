"""The vllm engine for real (GPU only): the bundled SmolLM2 model, prepared as the CPU tests prepare it, or
the model directory BONFORGE_VLLM_MODEL names. On a GPU machine: ``python -m pytest -m gpu``."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from bonforge.llm.config import VLLMTeacher
from bonforge.schema import PROBLEMS
from bonforge.storage.store import StageStore
from sampling import sample_stage



def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _cuda(), reason="no CUDA GPU here")]


@pytest.fixture
def model(request) -> str:
    """BONFORGE_VLLM_MODEL, else the prepared SmolLM2 (the CPU tests' fixture)."""
    return os.environ.get("BONFORGE_VLLM_MODEL") or request.getfixturevalue("smollm2")


def test_vllm_stage_samples_and_skips_long_prompts(tmp_path, model):
    pytest.importorskip("vllm")
    rows = [{"problem_id": f"g/{i}", "source": "g", "domain": "math", "question": f"What is {i} + {i}?"}
            for i in range(4)]
    rows.append({"problem_id": "g/long", "source": "g", "domain": "math", "question": "word " * 3000})
    teacher = VLLMTeacher(engine="vllm", name="v", model=model, n=2, max_tokens=64, max_model_len=1024,
                          gpu_memory_utilization=0.5)
    man = sample_stage(StageStore(tmp_path), pa.Table.from_pylist(rows, schema=PROBLEMS), teacher)
    assert man["rows"] == 8 and man["skipped_requests"] == 1 and man["problems_short_of_n"] == ["g/long"]
    assert man["tokens"]["completion"] > 0
