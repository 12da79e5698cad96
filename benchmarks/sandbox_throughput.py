"""Candidates verified per second on the HumanEval CodeT pool, three ways, side by side in one run:

1. warm pool: ``verify_code`` on bonforge's pool of warm containers (pool started and every problem's check
   planned before timing: a per-problem cost paid once per process, not per candidate);
2. ``docker run --rm`` per candidate, same isolation flags, same parallelism;
3. unisolated, the approach of the common HumanEval harness (openai/human-eval ``execution.py``): per
   candidate a ``multiprocessing.Manager`` and a forked ``Process`` exec-ing program + tests, joined with a
   timeout, from a thread pool (``humaneval_style_harness.py``, run in its own light process).

All use ``--workers`` parallel slots (default: cores) and the same 3 s limit. ``docker run`` is slow, so
it runs on the first ``--docker-run-samples`` samples of each problem (default 2 = 328 candidates); the
others on ``--samples`` (default 8 = 1,312). Rates are per candidate, so the ratios compare like with like.

The pool's candidates that run into the time limit (infinite loops) cost the limit in CPU seconds
whichever way they run; the script says how many and repeats the warm pool and the unisolated harness
without them.

A last table runs trivial candidates the same three ways: the per-candidate cost of each method
apart from the programs' own work (the CodeT pool holds a few infinite loops and heavy programs that
cost the same CPU seconds whichever way they run).

A CPU line under it gives the CPU time per candidate of the warm pool (this process, the containers'
cgroups, the check server's container included) and of the unisolated harness (all its processes): on a
machine shared with other jobs the wall-clock ratios measure the share of the CPUs each method got, the
CPU ratio does not.

The whole CodeT run is compared with its floor: the limited candidates' CPU seconds spread over the slots
plus the time of the rest. A scheduling table runs long programs on the slots: two 2 s programs on two
slots side by side (their latencies), and four infinite loops (two rounds of the limit on two slots).

The C++ line (``--cpp N``, default 8; ``--cpp-only``) judges N distinct copies of Library Checker's
``aplusb/sol/correct.cpp`` on its 12 tests, one at a time on one warm container: the compile-once cost (a
request that only builds) and the cost per test (the rest over 12), against ``g++`` with the same flags
and a plain run of the binary per test, unisolated.

    python benchmarks/sandbox_throughput.py [--samples 8] [--docker-run-samples 2] [--workers N] [--overhead 400]
                                            [--overhead-only] [--scheduling-only] [--problems N] [--time-limit 3]
                                            [--cpp 8] [--cpp-only]

A smoke run (seconds, no figure meant): ``--problems 2 --samples 2 --docker-run-samples 1 --overhead 8
--time-limit 1 --cpp 1``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from bonforge.sandbox.check_host import close_check_hosts, shared_check_host
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.image import build_image
from bonforge.sandbox.container import docker_argv
from bonforge.sandbox.pool import SandboxPool
from bonforge.judging.spec import parse_spec
from bonforge.sources.code import import_codet_pool, load_humaneval
from bonforge.schema import CANDIDATES
from bonforge.judging.code import build_request, verify_code

TIME_LIMIT = 3.0


def programs(problems: pa.Table, cands: pa.Table) -> list[str]:
    by_id = {p["problem_id"]: p for p in problems.to_pylist()}
    out = []
    for c in cands.select(["problem_id", "text"]).to_pylist():
        p = by_id[c["problem_id"]]
        out.append(p["question"] + c["text"] + "\n\n" + parse_spec(p["tests"], p["problem_id"]).check)
    return out


def docker_run_argv(cfg: CodeVerifyConfig) -> list[str]:
    """``docker run --rm`` of one candidate read from stdin, with the pool's isolation flags."""
    argv = docker_argv(cfg, cfg.image, "x")
    run_argv = argv[: argv.index("--name")] + argv[argv.index("--name") + 2 : argv.index(cfg.image) + 1]
    run_argv += ["timeout", "-s", "KILL", str(TIME_LIMIT * 2 + 1)]
    return run_argv + ["python3", "-c", "import sys; exec(sys.stdin.read(), {})"]


def docker_run_one(args: tuple[list[str], str]) -> bool:
    argv, program = args
    try:
        proc = subprocess.run(argv, input=program.encode(), capture_output=True, timeout=TIME_LIMIT * 2 + 10)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


def unisolated(progs: list[str], workers: int) -> tuple[float, int]:
    """Run the human-eval style harness in its own light process (not forked from this one, which holds
    pyarrow and bonforge): (seconds, passed)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(progs, f)
        f.flush()
        out = subprocess.run([sys.executable, str(Path(__file__).with_name("humaneval_style_harness.py")), f.name,
                              str(workers), str(TIME_LIMIT)], capture_output=True, text=True, check=True)  # fmt: skip
    res = json.loads(out.stdout.strip().splitlines()[-1])
    return res["seconds"], res["passed"]


def own_cpu() -> float:
    """CPU seconds of this process and its reaped children (the check server, the harness's processes)."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(ru.ru_utime + ru.ru_stime for ru in usage)


def container_cpu(ids: list[str]) -> float:
    """CPU seconds used so far by the containers ``ids`` (their cgroups, v1 or v2; 0 for one not found)."""
    total = 0.0
    for cid in ids:
        for path in (f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage", f"/sys/fs/cgroup/docker/{cid}/cpu.stat",
                     f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat"):  # fmt: skip
            try:
                text = Path(path).read_text()
            except OSError:
                continue
            total += int(text) / 1e9 if path.endswith("usage") else int(text.split()[1]) / 1e6
            break
    return total


def report(label: str, n: int, seconds: float, passed: int) -> float:
    print(f"{label:<34} {n:>6} {seconds:>9.1f} {n / seconds:>12.1f} {passed / n:>8.3f}", flush=True)
    return n / seconds


def timed(label: str, n: int, fn) -> tuple[float, float]:
    start = time.monotonic()
    passed = fn()
    dt = time.monotonic() - start
    print(f"{label:<34} {n:>6} {dt:>9.1f} {n / dt:>12.1f} {passed / n:>8.3f}", flush=True)
    return n / dt, passed / n


def main() -> None:
    global TIME_LIMIT
    ap = argparse.ArgumentParser()
    default_data = str(Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--data", default=os.environ.get("BONFORGE_DATA", default_data))
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--docker-run-samples", type=int, default=2)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--overhead", type=int, default=400, help="trivial candidates for the overhead table (0: skip)")
    ap.add_argument("--overhead-only", action="store_true", help="only the table of trivial candidates")
    ap.add_argument("--scheduling-only", action="store_true", help="only the table of long programs")
    ap.add_argument("--problems", type=int, help="only the candidates of the first N problems (default: all 164)")
    ap.add_argument("--time-limit", type=float, default=TIME_LIMIT, help="seconds per candidate, every method")
    ap.add_argument("--cpp", type=int, default=8, help="C++ candidates for the C++ line (0: skip)")
    ap.add_argument("--cpp-only", action="store_true", help="only the C++ line")
    args = ap.parse_args()
    TIME_LIMIT = args.time_limit
    data = Path(args.data) / "humaneval"
    problems = load_humaneval(data / "HumanEval.jsonl.gz")
    cands = import_codet_pool(data / "codet_codegen16B_samples.jsonl", problems, n=args.samples)
    if args.problems is not None:
        cands = cands.filter(pc.is_in(cands.column("problem_id"), problems.column("problem_id")[: args.problems]))
    small = cands.filter(pc.less(cands.column("sample_index"), args.docker_run_samples))
    cfg = CodeVerifyConfig(pool_size=args.workers, time_limit_s=TIME_LIMIT, image=build_image())
    if args.overhead_only:
        return overhead(problems, cfg, docker_run_argv(cfg), args)
    if args.scheduling_only:
        return scheduling(cfg)
    if args.cpp_only:
        return cpp_line(cfg, Path(args.data), args.cpp)

    print(f"HumanEval CodeT pool, {args.workers} parallel slots, {TIME_LIMIT:.0f} s limit; {os.cpu_count()} cores")
    print(f"{'method':<34} {'cands':>6} {'seconds':>9} {'cands/s':>12} {'pass@1':>8}")
    t = time.monotonic()
    pool = SandboxPool(cfg)
    pool.start()
    print(f"(warm pool of {args.workers} containers started in {time.monotonic() - t:.1f} s, not timed below)")
    verdicts = []
    with pool:
        plan_checks(problems, cands, cfg, pool)

        def warm():
            verdicts.append(verify_code(problems, cands, cfg, pool=pool))
            return sum(verdicts[-1].column("correct").to_pylist())

        warm_rate, _ = timed("warm pool (bonforge)", cands.num_rows, warm)

    run_argv = docker_run_argv(cfg)
    small_programs = programs(problems, small)
    with ThreadPoolExecutor(args.workers) as ex:
        run_rate, _ = timed("docker run --rm per candidate", small.num_rows,
                            lambda: sum(ex.map(docker_run_one, [(run_argv, p) for p in small_programs])))

    harness_rate = report("unisolated (human-eval style)", cands.num_rows,
                          *unisolated(programs(problems, cands), args.workers))

    print(f"warm pool / docker run:  {warm_rate / run_rate:6.1f}x  (target >= 10x)")
    print(f"warm pool / unisolated:  {warm_rate / harness_rate:6.1f}x  (target >= 5x)")
    limited = pc.equal(verdicts[0].column("status"), "timeout")
    n_limited = pc.sum(limited).as_py() or 0
    distinct = len(set(zip(cands.column("problem_id").to_pylist(), cands.column("text").to_pylist())))
    print(f"({distinct} distinct programs; {n_limited} candidates ran into the {TIME_LIMIT:.0f} s limit: "
          f"{n_limited * TIME_LIMIT:.0f} CPU-seconds whichever way they run, a floor of "
          f"{n_limited * TIME_LIMIT / args.workers:.1f} s on {args.workers} slots)")
    if n_limited:
        rest = cands.filter(pc.invert(limited))
        print(f"the same without those {n_limited}:")
        close_check_hosts()  # the rest starts where the whole pool started: plans made, no answer replayed
        with SandboxPool(cfg) as pool:
            plan_checks(problems, cands, cfg, pool)
            rest_rate, _ = timed("warm pool (bonforge)", rest.num_rows,
                                 lambda: sum(verify_code(problems, rest, cfg, pool=pool).column("correct").to_pylist()))
        rest_harness = report("unisolated (human-eval style)", rest.num_rows,
                              *unisolated(programs(problems, rest), args.workers))
        print(f"warm pool / unisolated:  {rest_rate / rest_harness:6.1f}x")
        floor = n_limited * TIME_LIMIT / args.workers + rest.num_rows / rest_rate
        whole = cands.num_rows / warm_rate
        print(f"whole CodeT pool: {whole:.1f} s against a floor of {floor:.1f} s (the limited candidates' CPU on "
              f"{args.workers} slots plus the rest): {floor / whole:.0%} of the floor  (target >= 90%)")
    scheduling(cfg)
    if args.overhead:
        overhead(problems, cfg, run_argv, args)
    if args.cpp:
        cpp_line(cfg, Path(args.data), args.cpp)


def plan_checks(problems: pa.Table, cands: pa.Table, cfg: CodeVerifyConfig, pool: SandboxPool) -> None:
    """Untimed, like the pool's start: a new check server's container up and every problem's check planned, by
    judging one candidate per problem (a per-problem cost, paid once per process). Both timed runs start
    from here: the checker also remembers the replays of the answers it has seen, so a run after another
    one would find most of its replays made (~1 s of this pool)."""
    t = time.monotonic()
    verify_code(problems, cands.filter(pc.equal(cands.column("sample_index"), 0)), cfg, pool=pool)
    print(f"(checker started, the checks of {problems.num_rows} problems planned, one candidate each run: "
          f"{time.monotonic() - t:.1f} s, not timed below)")


def cpp_line(cfg: CodeVerifyConfig, data: Path, n: int) -> None:
    """Compile-once and per-test cost of C++ candidates in the sandbox against g++ and a plain run."""
    from bonforge.sandbox.languages import LANGUAGES
    from bonforge.sources.problem_package import load_package

    folder = data / "library-checker" / "aplusb"
    row, sols = load_package(folder, [folder.parent / "common"])
    spec = parse_spec(row["tests"], row["problem_id"])
    source = next(s["text"] for s in sols if s["name"] == "correct.cpp")
    progs = [f"{source}\n// copy {k}\n" for k in range(n)]  # distinct programs: none shares a build
    one = cfg.model_copy(update={"pool_size": 1})
    with SandboxPool(one) as pool:
        pool.start()
        pool.run([build_request(spec, progs[0], one, "warm", language="cpp")])  # the container warm (not timed)
        start = time.monotonic()  # one slot: the requests run one after another (a latency would count the queue)
        pool.run([dict(build_request(spec, p, one, f"b{k}", language="cpp"), tests=[]) for k, p in enumerate(progs)])
        build_s = (time.monotonic() - start) / n
        start = time.monotonic()
        full = pool.run([build_request(spec, p, one, f"f{k}", language="cpp") for k, p in enumerate(progs)])
        full_s = (time.monotonic() - start) / n
    passed = sum(all(r["status"] == "ok" for r in o.get("results", [])) for o in full)
    tests = len(spec.inputs)
    with tempfile.TemporaryDirectory() as tmp:
        argv = [a.format(src="main.cpp") for a in LANGUAGES["cpp"].build]
        start = time.monotonic()
        for p in progs:
            Path(tmp, "main.cpp").write_text(p)
            subprocess.run(argv, cwd=tmp, check=True)
        plain_build = (time.monotonic() - start) / n
        start = time.monotonic()
        for _ in range(n):
            for text in spec.inputs:
                subprocess.run(["./main"], cwd=tmp, input=text.encode(), capture_output=True, check=True)
        plain_test = (time.monotonic() - start) / (n * tests)
    print(f"C++ (aplusb, {tests} tests, {n} distinct programs, one slot; {passed}/{n} passed):")
    print(f"  compile once: sandbox {build_s:.2f} s, g++ unisolated {plain_build:.2f} s "
          f"({build_s / plain_build:.2f}x)")
    print(f"  per test:     sandbox {(full_s - build_s) / tests * 1000:.1f} ms, plain run {plain_test * 1000:.1f} ms "
          f"({(full_s - build_s) / tests / plain_test:.2f}x)")


def scheduling(cfg: CodeVerifyConfig) -> None:
    """Long programs on the slots: two 2 s programs on two slots side by side (latencies), and four
    infinite loops (two rounds of the limit on two slots)."""
    spec = parse_spec(json.dumps({"kind": "stdio", "tests": [{"input": "", "output": ""}]}), "s")
    two = dict(cfg.model_dump(), pool_size=2)
    with SandboxPool(CodeVerifyConfig(**two)) as pool:
        sleeps = [f"import time\ntime.sleep(2)  # {i}\n" for i in range(2)]
        out = pool.run([build_request(spec, p, pool.cfg, f"s{i}") for i, p in enumerate(sleeps)])
        latencies = sorted(round(o["latency_s"], 2) for o in out)
        print(f"\ntwo 2 s programs on 2 slots: latencies {latencies} (side by side: both ~2 s)")
        loops = [f"while True:\n    pass  # {i}\n" for i in range(4)]
        start = time.monotonic()
        out = pool.run([build_request(spec, p, pool.cfg, f"l{i}") for i, p in enumerate(loops)])
        took, latencies = time.monotonic() - start, sorted(round(o["latency_s"], 1) for o in out)
        print(f"four infinite loops on 2 slots: {took:.1f} s, latencies {latencies} (two rounds: twice a loop's "
              f"own time, the {TIME_LIMIT:.0f} s limit on an idle machine, up to the {pool.cfg.wall_limit_s:.0f} s "
              "wall limit under load)")


def overhead(problems: pa.Table, cfg: CodeVerifyConfig, run_argv: list[str], args) -> None:
    """The same three ways on trivial candidates (a correct one-line solution of HumanEval/53, add, each
    made distinct by a comment: identical programs would run once): what each method costs per
    candidate apart from the programs' own work."""
    add = problems.filter(pc.equal(problems.column("problem_id"), "HumanEval/53"))
    n = args.overhead
    n_run = min(n, max(n // 4, 8))
    cands = pa.Table.from_pylist(
        [{"candidate_id": f"HumanEval/53/t/{i}", "problem_id": "HumanEval/53", "teacher": "t", "sample_index": i,
          "text": f"    return x + y  # {i}\n"} for i in range(n)], schema=CANDIDATES)  # fmt: skip
    progs = programs(add, cands)
    print(f"\nper-candidate overhead: {n} trivial candidates ({n_run} for docker run)")
    with SandboxPool(cfg) as pool:
        verify_code(add, cands.slice(0, 4), cfg, pool=pool)
        checker = shared_check_host(cfg)._name  # the check server's container: its CPU counts too
        inspect = ["docker", "inspect", "--format", "{{.Id}}", *[w.name for w in list(pool._workers)],
                   *([checker] if checker else [])]  # fmt: skip
        ids = subprocess.run(inspect, capture_output=True, text=True).stdout.split()
        host, box = own_cpu(), container_cpu(ids)
        warm, _ = timed("warm pool (bonforge)", n,
                        lambda: sum(verify_code(add, cands, cfg, pool=pool).column("correct").to_pylist()))
        host, box = own_cpu() - host, container_cpu(ids) - box
    with ThreadPoolExecutor(args.workers) as ex:
        run, _ = timed("docker run --rm per candidate", n_run,
                       lambda: sum(ex.map(docker_run_one, [(run_argv, p) for p in progs[:n_run]])))
    uni_cpu = own_cpu()
    uni = report("unisolated (human-eval style)", n, *unisolated(progs, args.workers))
    uni_cpu = own_cpu() - uni_cpu
    print(f"warm pool / docker run:  {warm / run:6.1f}x;  warm pool / unisolated:  {warm / uni:6.1f}x")
    print(f"CPU per candidate: warm pool {1000 * (host + box) / n:.2f} ms (host {1000 * host / n:.2f}, containers "
          f"{1000 * box / n:.2f}), unisolated {1000 * uni_cpu / n:.2f} ms: {uni_cpu / (host + box):.1f}x less CPU")


if __name__ == "__main__":
    sys.exit(main())
