"""What the real-model tests share: small prompts and problem tables, and an engine wrapper that counts
requests and outlives the sampling stage (which closes its engine), so one loaded model serves a module."""

from __future__ import annotations

import os

import pyarrow as pa

from bonforge.llm.base import Request
from bonforge.llm.config import VLLMTeacher
from bonforge.schema import PROBLEMS

QUESTIONS = ["What is 2 + 3?", "Name a colour of the sky.", "What is 10 minus 4?", "Say hello in French."]
LONG = "Count the words in this text: " + "apple banana cherry " * 3000  # ~9,000 tokens: over every window here


def smol_teacher(**fields) -> VLLMTeacher:
    """SmolLM2 in vLLM on CPU with what the engine reads when it starts (window, dtype, cores) as the session's
    one engine (``smol_vllm`` in ``tests/conftest.py``) has it, so that the tests that sample on that engine, and
    a child process that starts its own, compute the same samples; ``fields``: the rest of a test's teacher."""
    base = dict(engine="vllm", name="smol", model="smollm2-135m-instruct", device="cpu", dtype="float32",
                max_model_len=2048, cpus_per_replica=os.cpu_count() or 1, max_tokens=16)
    return VLLMTeacher(**{**base, **fields})


def chat(rid: str, text: str, *, n: int, seed: int, max_tokens: int = 16) -> Request:
    return Request(id=rid, messages=({"role": "user", "content": text},), n=n, temperature=1.0, top_p=0.95,
                   max_tokens=max_tokens, seed=seed)


def problems(count: int = len(QUESTIONS), long: bool = False) -> pa.Table:
    rows = [{"problem_id": f"real/{i}", "source": "real", "domain": "math", "question": q, "answer": None,
             "tests": None, "metadata": None} for i, q in enumerate(QUESTIONS[:count])]
    if long:
        rows.append({"problem_id": "real/long", "source": "real", "domain": "math", "question": LONG,
                     "answer": None, "tests": None, "metadata": None})
    return pa.Table.from_pylist(rows, schema=PROBLEMS)


class Kept:
    """An engine the stage may 'close' without unloading it; counts the requests it generated."""

    def __init__(self, engine):
        self.engine, self.name, self.requests = engine, engine.name, []

    def start(self) -> None:
        self.engine.start()

    def generate(self, requests: list[Request], progress=None):
        self.requests += requests
        return self.engine.generate(requests, progress)

    def close(self) -> None:
        """The module's fixture closes the real engine."""


def texts(out) -> list[str]:
    return [c.text for cs in out for c in cs]


def check_samples(out, requests: list[Request], max_tokens: int) -> None:
    """n samples per request with seeds seed+i, distinct texts, finish reasons that agree with the counts."""
    for r, comps in zip(requests, out):
        assert [c.index for c in comps] == list(range(r.n))
        assert [c.seed for c in comps] == [r.seed + i for i in range(r.n)]
        for c in comps:
            assert c.prompt_tokens > 0 and 1 <= c.completion_tokens <= max_tokens
            assert c.finish_reason in ("stop", "length")
            if c.finish_reason == "length":
                assert c.completion_tokens == max_tokens
    assert len(set(texts(out))) > len(out)  # distinct seeds give distinct samples
