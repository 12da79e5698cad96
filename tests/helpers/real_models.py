"""What the real-model tests share: small prompts and problem tables, and an engine wrapper that counts
requests and outlives the sampling stage (which closes its engine), so one loaded model serves a module."""

from __future__ import annotations

import os
import time
from pathlib import Path

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

    def stream(self, out):
        """The engine's stream (``bonforge.llm.stream``), its requests counted as they are put."""
        from bonforge.llm.stream import open_stream

        return Recorded(self, open_stream(self.engine, out))

    def close(self) -> None:
        """The module's fixture closes the real engine."""


class Recorded:
    def __init__(self, kept: Kept, stream):
        self.kept, self.stream = kept, stream

    def put(self, requests: list[Request]) -> None:
        self.kept.requests += requests
        self.stream.put(requests)

    def close(self) -> None:
        self.stream.close()


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


class VLLMServer:
    """vLLM's OpenAI-compatible server (``args``: the model's and the runner's) on 127.0.0.1, started in a process
    group of its own, its output in ``log``. Constructing it starts the process; ``url`` waits for ``/health``
    (the load: most of a minute on a loaded 2-core machine, mostly one core)."""

    def __init__(self, args: list[str], log: Path):
        from procs import free_port, start

        self.port, self.log = free_port(), log
        env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
        self.proc = start(["-m", "vllm.entrypoints.openai.api_server", *args, "--host", "127.0.0.1",
                           "--port", str(self.port)], env=env, log=log)
        self._url: str | None = None

    def url(self, timeout_s: float = 600) -> str:
        """The base URL (``.../v1``) once the server answers; fails the test with the log's end if it exits or
        does not answer within ``timeout_s``."""
        import httpx
        import pytest

        base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + timeout_s
        while self._url is None:
            if self.proc.poll() is not None:
                pytest.fail(f"the vLLM server exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    self._url = f"{base}/v1"
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the vLLM server did not answer within {timeout_s:.0f} s:\n{self.log.read_text()[-3000:]}")
            time.sleep(1)
        return self._url

    def stop(self) -> None:
        from procs import kill_group

        kill_group(self.proc, 15, wait_s=30)
