"""Sampling throughput: bonforge's sampling stage (vLLM in a Ray actor, seeded n=1 requests, sharded writes)
against one raw ``LLM.generate`` call on the same prompts (``n`` samples per prompt), side by side.

    python benchmarks/gpu_vllm.py --model /models/Qwen3-0.6B [--problems 128 --n 16 --max-tokens 1024]

The GPU machine has no internet: ``--model`` must be a local directory with the weights (or a hub id
already in the local HF cache). Needs one GPU and ``pip install -e .[vllm]``. Prints completion tokens/s
of both runs and their ratio (target: stage >= 0.95 x raw); exits 1 below the target. Both figures count
generation time only (model loading excluded); the stage figure includes prompt building, the Ray hop
and writing Parquet shards. Takes about 3-5 minutes on one H200 for a 0.6B-1.7B model with the defaults.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time

import pyarrow as pa

from bonforge.schema import PROBLEMS
from bonforge.storage.store import StageStore
from bonforge.llm.config import VLLMTeacher
from bonforge.tasks.sample import problem_seed, read_template, render, sample_stage, template_path


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


def run_stage(args, problems: pa.Table, teacher: VLLMTeacher) -> tuple[float, int, float]:
    import ray

    with tempfile.TemporaryDirectory() as root:
        t0 = time.perf_counter()
        man = sample_stage(StageStore(root), problems, "bench-problems", teacher)
        wall = time.perf_counter() - t0
    ray.shutdown()  # frees the GPU for the raw run
    thr = man["throughput"]
    print(f"stage: {man['rows']} samples, {thr['completion_tokens']} completion tokens, "
          f"generate {thr['generate_s']:.1f}s, wall with model load {wall:.1f}s, "
          f"skipped requests {man['skipped_requests']}", flush=True)
    return thr["completion_tokens_per_s"], thr["completion_tokens"], thr["generate_s"]


def run_raw(args, problems: pa.Table, teacher: VLLMTeacher) -> tuple[float, int, float]:
    from vllm import LLM, SamplingParams

    llm = LLM(model=args.model, dtype=teacher.dtype, max_model_len=teacher.max_model_len,
              gpu_memory_utilization=teacher.gpu_memory_utilization, seed=0)
    tok = llm.get_tokenizer()
    template = read_template(template_path(teacher, "math"), teacher.name)
    prompts, params = [], []
    for pid, q in zip(problems.column("problem_id").to_pylist(), problems.column("question").to_pylist()):
        text = tok.apply_chat_template([{"role": "user", "content": render(template, q)}], tokenize=False,
                                       add_generation_prompt=True)
        prompts.append({"prompt_token_ids": tok(text, add_special_tokens=False)["input_ids"]})
        params.append(SamplingParams(n=args.n, temperature=teacher.temperature, top_p=teacher.top_p,
                                     max_tokens=teacher.max_tokens, seed=problem_seed(teacher.seed, pid)))
    t0 = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    secs = time.perf_counter() - t0
    tokens = sum(len(o.token_ids) for out in outputs for o in out.outputs)
    print(f"raw:   {sum(len(out.outputs) for out in outputs)} samples, {tokens} completion tokens, "
          f"generate {secs:.1f}s", flush=True)
    return tokens / secs, tokens, secs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="local model directory (no hub access on GPU machines)")
    ap.add_argument("--problems", type=int, default=128)
    ap.add_argument("--n", type=int, default=16, help="samples per problem")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--shard-problems", type=int, default=None, help="problems per stage shard (default: all)")
    ap.add_argument("--target", type=float, default=0.95)
    args = ap.parse_args()

    problems = make_problems(args.problems)
    teacher = VLLMTeacher(engine="vllm", name="bench", model=args.model, n=args.n, temperature=0.6, top_p=0.95,
                          max_tokens=args.max_tokens, max_model_len=args.max_model_len,
                          shard_problems=args.shard_problems or args.problems, gpu_memory_utilization=0.85)
    stage_tps, _, _ = run_stage(args, problems, teacher)
    raw_tps, _, _ = run_raw(args, problems, teacher)
    ratio = stage_tps / raw_tps
    print(f"tokens/s  stage {stage_tps:,.0f}  raw {raw_tps:,.0f}  ratio {ratio:.3f}  "
          f"({'meets' if ratio >= args.target else 'BELOW'} target {args.target})")
    return 0 if ratio >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
