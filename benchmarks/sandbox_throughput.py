"""Candidates verified per second on the HumanEval CodeT pool, three ways, side by side in one run:

1. warm pool: ``verify_code`` on bonforge's pool of warm containers (pool started before timing);
2. ``docker run --rm`` per candidate, same isolation flags, same parallelism;
3. unisolated, the approach of the common HumanEval harness (openai/human-eval ``execution.py``): per
   candidate a ``multiprocessing.Manager`` and a forked ``Process`` exec-ing program + tests, joined with a
   timeout, from a thread pool.

All use ``--workers`` parallel slots (default: cores) and the same 3 s limit. ``docker run`` is slow, so
it runs on the first ``--docker-run-samples`` samples of each problem (default 2 = 328 candidates); the
others on ``--samples`` (default 8 = 1,312). Rates are per candidate, so the ratios compare like with like.

    python benchmarks/sandbox_throughput.py [--samples 8] [--docker-run-samples 2] [--workers N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.image import build_image
from bonforge.sandbox.pool import SandboxPool, docker_argv
from bonforge.sandbox.spec import parse_spec
from bonforge.tasks.load_code import import_codet_pool, load_humaneval
from bonforge.tasks.verify_code import verify_code

TIME_LIMIT = 3.0


def programs(problems: pa.Table, cands: pa.Table) -> list[str]:
    by_id = {p["problem_id"]: p for p in problems.to_pylist()}
    out = []
    for c in cands.select(["problem_id", "text"]).to_pylist():
        p = by_id[c["problem_id"]]
        out.append(p["question"] + c["text"] + "\n\n" + parse_spec(p["tests"], p["problem_id"]).check)
    return out


def docker_run_one(args: tuple[list[str], str]) -> bool:
    argv, program = args
    try:
        proc = subprocess.run(argv, input=program.encode(), capture_output=True, timeout=TIME_LIMIT * 2 + 10)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


def _unisolated_target(program: str, result) -> None:
    try:
        exec(program, {})
        result.append("passed")
    except BaseException:
        result.append("failed")


def unisolated_one(program: str) -> bool:
    """As openai/human-eval's check_correctness: Manager + forked Process + join(timeout + 1)."""
    manager = multiprocessing.Manager()
    result = manager.list()
    p = multiprocessing.Process(target=_unisolated_target, args=(program, result))
    p.start()
    p.join(timeout=TIME_LIMIT + 1)
    if p.is_alive():
        p.kill()
    ok = len(result) > 0 and result[0] == "passed"
    manager.shutdown()
    return ok


def timed(label: str, n: int, fn) -> tuple[float, float]:
    start = time.monotonic()
    passed = fn()
    dt = time.monotonic() - start
    print(f"{label:<34} {n:>6} {dt:>9.1f} {n / dt:>12.1f} {passed / n:>8.3f}", flush=True)
    return n / dt, passed / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.environ.get("BONFORGE_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data")))
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--docker-run-samples", type=int, default=2)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    data = Path(args.data) / "humaneval"
    problems = load_humaneval(data / "HumanEval.jsonl.gz")
    cands = import_codet_pool(data / "codet_codegen16B_samples.jsonl", problems, n=args.samples)
    small = cands.filter(pc.less(cands.column("sample_index"), args.docker_run_samples))
    cfg = CodeVerifyConfig(pool_size=args.workers, time_limit_s=TIME_LIMIT, image=build_image())

    print(f"HumanEval CodeT pool, {args.workers} parallel slots, {TIME_LIMIT:.0f} s limit; {os.cpu_count()} cores")
    print(f"{'method':<34} {'cands':>6} {'seconds':>9} {'cands/s':>12} {'pass@1':>8}")
    t = time.monotonic()
    pool = SandboxPool(cfg)
    pool.start()
    print(f"(warm pool of {args.workers} containers started in {time.monotonic() - t:.1f} s, not timed below)")
    with pool:
        def warm():
            v = verify_code(problems, cands, cfg, pool=pool)
            return sum(v.column("correct").to_pylist())

        warm_rate, _ = timed("warm pool (bonforge)", cands.num_rows, warm)

    argv = docker_argv(cfg, cfg.image, "x")
    run_argv = argv[: argv.index("--name")] + argv[argv.index("--name") + 2 : argv.index(cfg.image) + 1]
    run_argv += ["timeout", "-s", "KILL", str(TIME_LIMIT * 2 + 1), "python3", "-c", "import sys; exec(sys.stdin.read(), {})"]
    small_programs = programs(problems, small)
    with ThreadPoolExecutor(args.workers) as ex:
        run_rate, _ = timed("docker run --rm per candidate", small.num_rows,
                            lambda: sum(ex.map(docker_run_one, [(run_argv, p) for p in small_programs])))

    all_programs = programs(problems, cands)
    with ThreadPoolExecutor(args.workers) as ex:
        harness_rate, _ = timed("unisolated (human-eval style)", cands.num_rows,
                                lambda: sum(ex.map(unisolated_one, all_programs)))

    print(f"warm pool / docker run:  {warm_rate / run_rate:6.1f}x  (target >= 10x)")
    print(f"warm pool / unisolated:  {warm_rate / harness_rate:6.1f}x  (target >= 5x)")


if __name__ == "__main__":
    multiprocessing.set_start_method("fork")
    sys.exit(main())
