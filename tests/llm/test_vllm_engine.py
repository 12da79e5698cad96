"""vLLM request building and output mapping, without vLLM or a GPU (stand-ins for its outputs)."""

from __future__ import annotations

import logging
import sys
import types
from types import SimpleNamespace

import pytest

from bonforge.llm.base import Request
from bonforge.llm.config import VLLMTeacher
from bonforge.errors import ConfigError
from bonforge.llm.base import fits
from bonforge.llm.vllm_engine import (VLLMEngine, Worker, actor_options, chunks, engine_args, job,
                                      output_fields, sampling_kwargs, to_completions)


def req(rid: str, n: int = 2, **kw) -> Request:
    return Request(id=rid, messages=({"role": "user", "content": rid},), n=n, max_tokens=64, seed=10, **kw)


def test_sampling_kwargs_one_seeded_sample_with_max_tokens():
    kw = sampling_kwargs(req("a", temperature=0.6, top_p=0.95, stop=("###",)), 3)
    assert kw == {"n": 1, "temperature": 0.6, "top_p": 0.95, "max_tokens": 64, "seed": 13, "stop": ["###"]}
    assert sampling_kwargs(req("a"), 0)["stop"] is None
    assert job(Request(id="r", prompt="hi", max_tokens=5), 0)["prompt"] == "hi"


def test_fits_leaves_room_for_max_tokens():
    assert fits(100, 28, 128) and not fits(101, 28, 128)


def test_output_fields_from_a_request_output():
    sample = SimpleNamespace(text="<think>hmm</think>42", token_ids=[5, 6, 7], finish_reason="stop", stop_reason="##")
    out = SimpleNamespace(prompt_token_ids=[1, 2, 3, 4], outputs=[sample])
    assert output_fields(out) == {"text": "<think>hmm</think>42", "finish_reason": "stop", "prompt_tokens": 4,
                                  "completion_tokens": 3, "stop_reason": "##"}  # the stop string that matched
    eos = SimpleNamespace(prompt_token_ids=[1], outputs=[SimpleNamespace(**{**vars(sample), "stop_reason": 2})])
    assert output_fields(eos)["stop_reason"] is None  # a stop token id is no stop string


def test_to_completions_regroups_and_reports_skipped(caplog):
    ok = {"text": "<think>r</think>final", "finish_reason": "length", "prompt_tokens": 4, "completion_tokens": 9}
    results = [ok, ok, {"skipped": 500, "window": 512}, {"skipped": 500, "window": 512}, ok, ok]
    with caplog.at_level(logging.WARNING, logger="bonforge"):
        out = to_completions([req("a"), req("long"), req("b")], results, "m", 1.0)
    assert [len(cs) for cs in out] == [2, 0, 2]
    assert "request long skipped: prompt of 500 tokens + max_tokens 64 exceeds the model window 512" in caplog.text
    c = out[2][1]
    assert (c.request_id, c.index, c.seed, c.text, c.reasoning, c.finish_reason) == ("b", 1, 11, "final", "r", "length")


def test_chunks_are_contiguous_and_cover_everything():
    assert chunks(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert chunks([1], 2) == [[1], []]


def test_engine_args_from_teacher():
    t = VLLMTeacher(engine="vllm", name="q", model="Qwen/Qwen3-1.7B", max_model_len=8192, max_tokens=4096,
                    tensor_parallel_size=2)
    args = engine_args(t)
    assert args["model"] == "Qwen/Qwen3-1.7B" and args["max_model_len"] == 8192
    assert args["tensor_parallel_size"] == 2 and args["distributed_executor_backend"] == "mp"
    assert "distributed_executor_backend" not in engine_args(t.model_copy(update={"tensor_parallel_size": 1}))


class FakeTokenizer:
    def apply_chat_template(self, messages, tokenize, add_generation_prompt, continue_final_message=False):
        assert tokenize is False and add_generation_prompt != continue_final_message
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + ("" if continue_final_message
                                                                             else "<assistant>")

    def encode(self, text, add_special_tokens):
        assert add_special_tokens is False  # the chat template holds them
        return list(range(len(text)))


class FakeLLM:
    def __init__(self):
        self.calls = []

    def generate(self, prompts, params, use_tqdm):
        self.calls.append((prompts, params))
        return [SimpleNamespace(prompt_token_ids=p["prompt_token_ids"],
                                outputs=[SimpleNamespace(text=f"seed {sp['seed']}", token_ids=[0] * 3,
                                                         finish_reason="stop", stop_reason=None)])
                for p, sp in zip(prompts, params)]


def test_a_continued_request_goes_on_with_the_last_message_in_place():
    worker = Worker.__new__(Worker)
    worker.tokenizer = FakeTokenizer()
    going = Request(id="c", messages=({"role": "user", "content": "q"}, {"role": "assistant", "content": "so far"}),
                    continue_final=True)
    assert worker._token_ids(job(going, 0), {}) == list(range(len("<user>q<assistant>so far")))
    assert job(req("a"), 0)["continue"] is False


def test_worker_skips_long_prompts_without_aborting_the_batch(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=lambda **kw: kw))
    worker = Worker.__new__(Worker)
    worker.llm, worker.tokenizer, worker.window = FakeLLM(), FakeTokenizer(), 90
    long = Request(id="long", messages=({"role": "user", "content": "x" * 40},), n=2, max_tokens=64, seed=0)
    items = [job(req("a"), 0), job(long, 0), job(long, 1), job(req("a"), 1)]
    results = worker.generate(items)
    assert results[1] == results[2] == {"skipped": 57, "window": 90}
    assert results[0]["text"] == "seed 10" and results[3]["text"] == "seed 11"
    (prompts, params), = worker.llm.calls  # one generate call, the long prompt left out
    assert len(prompts) == 2 and all(p["max_tokens"] == 64 for p in params)


def test_vllm_config_checks_window():
    with pytest.raises(ValueError, match=r"max_tokens \(4096\) must be below max_model_len \(2048\)"):
        VLLMTeacher(engine="vllm", name="q", model="m", max_model_len=2048, max_tokens=4096)


def test_cpu_replicas_take_cpu_cores_and_whole_prompt_prefill():
    t = VLLMTeacher(engine="vllm", name="q", model="m", device="cpu", max_model_len=2048, max_tokens=256)
    args = engine_args(t)
    assert args["gpu_memory_utilization"] == 0.2 and args["enforce_eager"] is True
    assert args["enable_chunked_prefill"] is False and args["max_num_batched_tokens"] == 2048
    threads = {"OMP_NUM_THREADS": "8", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    assert actor_options(t, {"CPU": 8.0}) == {"num_cpus": 8, "num_gpus": 0, "runtime_env": {"env_vars": threads}}
    two = t.model_copy(update={"num_replicas": 2, "cpus_per_replica": None})
    assert actor_options(two, {"CPU": 8.0})["num_cpus"] == 4
    gpu = VLLMTeacher(engine="vllm", name="q", model="m")
    assert engine_args(gpu)["gpu_memory_utilization"] == 0.9 and engine_args(gpu)["enforce_eager"] is False
    assert "enable_chunked_prefill" not in engine_args(gpu)
    assert actor_options(gpu, {"CPU": 8.0, "GPU": 1.0}) == {"num_gpus": 1}


def test_a_replica_larger_than_the_cluster_fails_at_start_not_waits():
    t = VLLMTeacher(engine="vllm", name="q", model="m", device="cpu", cpus_per_replica=16)
    with pytest.raises(ConfigError,
                       match=r"teachers.q.cpus_per_replica: a replica needs 16 CPUs, the Ray cluster has 2"):
        actor_options(t, {"CPU": 2.0})
    with pytest.raises(ConfigError,
                       match=r"teachers.q.tensor_parallel_size: a replica needs 2 GPUs, the Ray cluster has 0"):
        actor_options(VLLMTeacher(engine="vllm", name="q", model="m", tensor_parallel_size=2), {"CPU": 2.0})
    with pytest.raises(ValueError, match="tensor_parallel_size applies to device: gpu"):
        VLLMTeacher(engine="vllm", name="q", model="m", device="cpu", tensor_parallel_size=2)


class BarLLM(FakeLLM):
    """Drives ``use_tqdm`` as vLLM does: a bar round the prompts as they are rendered, then a bar of the
    prompts updated as each finishes."""

    def generate(self, prompts, params, use_tqdm):
        assert len(list(use_tqdm(prompts, desc="Rendering prompts"))) == len(prompts)  # iterated: not counted
        bar = use_tqdm(total=len(prompts), desc="Processed prompts", dynamic_ncols=True, postfix="est. speed")
        for _ in prompts:
            bar.update(1)
            _ = bar.format_dict["elapsed"]
        bar.close()
        return super().generate(prompts, params, use_tqdm)


class Counter:
    def __init__(self):
        self.sent: list[int] = []
        self.add = SimpleNamespace(remote=self.sent.append)


def test_a_replica_counts_the_samples_as_vllm_finishes_them(monkeypatch):
    import bonforge.llm.vllm_engine as vllm_engine

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=lambda **kw: kw))
    worker = Worker.__new__(Worker)
    worker.llm, worker.tokenizer, worker.window = BarLLM(), FakeTokenizer(), 90
    items = [job(req(p), i) for p in ("a", "b", "c") for i in range(2)]
    counter = Counter()
    monkeypatch.setattr(vllm_engine, "REPORT_EVERY_S", 0.0)
    assert len(worker.generate(items, counter)) == 6
    assert counter.sent == [1] * 6  # each sample as it finished
    monkeypatch.setattr(vllm_engine, "REPORT_EVERY_S", 3600.0)
    counter = Counter()
    worker.generate(items, counter)
    assert counter.sent == [6]  # the rest when the batch ends


class Ref:
    def __init__(self, value):
        self.value = value


def test_the_progress_ends_at_every_finished_sample_when_the_counter_lags(monkeypatch):
    """The replicas tell the counter actor from their own processes: when ``generate`` has every result, the
    counter may not have taken in their last reports yet. The progress still ends at the samples finished (the
    prompt that did not fit is not one)."""
    import bonforge.llm.vllm_engine as vllm_engine

    lagging = SimpleNamespace(count=SimpleNamespace(remote=lambda: Ref(2)))  # it heard of 2 of the 3 samples
    fake_ray = SimpleNamespace(remote=lambda **_: lambda cls: SimpleNamespace(remote=lambda: lagging),
                               wait=lambda refs, num_returns, timeout: (refs, []), kill=lambda actor: None,
                               get=lambda ref: ref.value if isinstance(ref, Ref) else [r.value for r in ref])
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    monkeypatch.setattr(vllm_engine, "to_completions", lambda requests, results, model, latency: results)
    worker = SimpleNamespace(generate=SimpleNamespace(
        remote=lambda items, counter: Ref([{"skipped": 900} if i == 1 else {"text": "x"} for i in range(len(items))])))
    engine = VLLMEngine(VLLMTeacher(engine="vllm", name="q", model="m", device="cpu"))
    engine.workers = [worker]
    heard: list[int] = []
    engine.generate([req("a", n=2), req("b", n=2)], heard.append)
    assert heard == [2, 3]


class RunningEngine:
    """Stands for vLLM's ``LLMEngine``: requests added at any time, each ``step`` finishing the oldest one."""

    def __init__(self):
        self.running: dict[str, tuple] = {}
        self.aborted: list[str] = []

    def add_request(self, request_id, prompt, params):
        assert params["output_kind"] == "final"  # only the finished output of each request
        self.running[request_id] = (prompt, params)

    def has_unfinished_requests(self):
        return bool(self.running)

    def step(self):
        rid = next(iter(self.running))
        prompt, params = self.running.pop(rid)
        return [SimpleNamespace(request_id=rid, finished=True, prompt_token_ids=prompt["prompt_token_ids"],
                                outputs=[SimpleNamespace(text=f"seed {params['seed']}", token_ids=[0] * 3,
                                                         finish_reason="stop", stop_reason=None)])]

    def abort_request(self, ids):
        self.aborted += ids
        for rid in ids:
            self.running.pop(rid)


def streaming_worker(monkeypatch) -> Worker:
    import bonforge.llm.vllm_engine as vllm_engine

    sampling = types.SimpleNamespace(RequestOutputKind=SimpleNamespace(FINAL_ONLY="final"))
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=lambda **kw: kw))
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sampling)
    monkeypatch.setattr(vllm_engine, "STEP_S", 0.0)  # a feed call returns as soon as one request is done
    worker = Worker.__new__(Worker)
    worker.llm = SimpleNamespace(llm_engine=RunningEngine())
    worker.tokenizer, worker.window, worker.streamed = FakeTokenizer(), 90, set()
    return worker


def test_a_streaming_replica_takes_requests_into_its_running_engine(monkeypatch):
    worker = streaming_worker(monkeypatch)
    long = Request(id="long", messages=({"role": "user", "content": "x" * 40},), n=1, max_tokens=64, seed=0)
    first = worker.feed([{**job(req("a"), i), "id": f"a/{i}"} for i in range(2)] + [{**job(long, 0), "id": "l/0"}])
    assert first == [{"id": "l/0", "skipped": 57, "window": 90},  # left out, at once
                     {"id": "a/0", "text": "seed 10", "finish_reason": "stop", "prompt_tokens": 18,
                      "completion_tokens": 3, "stop_reason": None}]
    assert worker.streamed == {"a/1"}  # still running: the next call goes on with it and with what it adds
    second = worker.feed([{**job(req("b"), 0), "id": "b/0"}])
    assert [r["id"] for r in second] == ["a/1"]
    worker.drop()  # the stream closed: what is left is aborted
    assert worker.llm.llm_engine.aborted == ["b/0"] and not worker.llm.llm_engine.running and not worker.streamed


def test_a_stream_returns_each_request_whole_as_its_samples_finish(monkeypatch):
    import queue

    import bonforge.llm.vllm_engine as vllm_engine

    worker = streaming_worker(monkeypatch)
    actor = SimpleNamespace(feed=SimpleNamespace(remote=lambda items: Ref(worker.feed(items))),
                            drop=SimpleNamespace(remote=lambda: Ref(worker.drop())))
    fake_ray = SimpleNamespace(wait=lambda refs, num_returns, timeout: (refs[:1], refs[1:]),
                               get=lambda ref: [r.value for r in ref] if isinstance(ref, list) else ref.value,
                               exceptions=SimpleNamespace(RayError=RuntimeError))
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    engine = VLLMEngine(VLLMTeacher(engine="vllm", name="q", model="m", device="cpu"))
    engine.workers = [actor]
    monkeypatch.setattr(engine, "start", lambda: None)
    out: queue.Queue = queue.Queue()
    stream = vllm_engine.Stream(engine, out)
    try:
        stream.put([req("a", n=3)])
        got = [out.get(timeout=30)]
        stream.put([req("b", n=1)])
        got.append(out.get(timeout=30))
    finally:
        stream.close()
    assert [(r.id, [(c.index, c.seed, c.text) for c in comps]) for r, comps in got] == [
        ("a", [(0, 10, "seed 10"), (1, 11, "seed 11"), (2, 12, "seed 12")]), ("b", [(0, 10, "seed 10")])]
    assert out.empty() and not worker.streamed
