"""Fenced blocks on a real engine: SmolLM2-135M in transformers, on CPU, its blocks run in the real sandbox.
The prompt is a conversation whose first answer is a worked block and its output (with a plain instruction the
135M model writes no block; after the example it does; its answers may be wrong, which is fine): the engine
stops at the closing fence, the block runs in the sandbox, the output block is appended and the same sequence
goes on, continued in place by the chat template."""

from __future__ import annotations

import json

import pytest
from real_models import Kept

from bonforge.llm.base import Request
from bonforge.llm.config import PythonTool, TransformersTeacher
from bonforge.llm.fenced import FENCE, inline, open_python, sample_fenced
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.pool import close_shared_pools
from bonforge.sandbox.tool_calls import PythonCalls
from bonforge.tables import trajectories

pytestmark = [pytest.mark.slow, pytest.mark.docker]
EXAMPLE = "```python\nprint(6 * 7)\n```\n```output\n42\n```\nThe answer is 42."
# Greedy, the model answers the second question with "```python\nprint(12 * 13)\n```\n```output\n186\n```..."
# when nothing stops it: it writes the block, then forges a wrong output.
PROMPT = ({"role": "user", "content": "What is 6 * 7? Use Python."}, {"role": "assistant", "content": EXAMPLE},
          {"role": "user", "content": "What is 12 * 13? Use Python."})


@pytest.fixture(scope="module")
def calls(sandbox_image):
    yield PythonCalls(CodeVerifyConfig(image=sandbox_image, pool_size=1, time_limit_s=5.0), 5.0)
    close_shared_pools()


def test_smollm2_in_transformers_pauses_at_its_block_the_sandbox_runs_it_and_the_sequence_goes_on(smollm2, calls):
    from bonforge.llm.transformers_engine import TransformersEngine

    real = TransformersEngine(TransformersTeacher(engine="transformers", name="smol", model="smollm2-135m-instruct",
                                                  dtype="float32", max_tokens=48))
    try:
        paused_ran_and_went_on(Kept(real), calls)
    finally:
        real.close()


def test_smollm2_in_vllm_on_cpu_pauses_at_its_block_the_sandbox_runs_it_and_the_sequence_goes_on(smol_vllm, calls):
    paused_ran_and_went_on(Kept(smol_vllm), calls)


def paused_ran_and_went_on(engine: Kept, calls: PythonCalls) -> None:
    request = Request(id="q", messages=PROMPT, temperature=0.0, max_tokens=48)
    (got,), = sample_fenced(engine, [request], calls, PythonTool(style="fenced", max_calls=2))
    messages = json.loads(got.messages)
    facts = trajectories.check(messages)
    assert facts.calls >= 1 and facts.tool_messages == facts.calls
    code = json.loads(messages[3]["tool_calls"][0]["function"]["arguments"])["code"]
    assert messages[3]["content"].endswith(FENCE) and open_python(messages[3]["content"][:-len(FENCE)]) == code
    assert code == "print(12 * 13)\n" and messages[4]["content"] == "156\n"  # ran in the sandbox, not forged
    first, second = engine.requests[0], engine.requests[1]
    assert FENCE in first.stop and not first.continue_final
    assert second.continue_final and second.messages[-1] == {"role": "assistant",
                                                             "content": inline(messages[3:5])}
    assert got.completion_tokens > 0 and inline(messages[3:]).startswith(second.messages[-1]["content"])
    print("trajectory:", json.dumps(messages[3:], indent=1))
