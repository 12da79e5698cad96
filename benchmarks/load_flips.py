"""Load is not a label: the same candidates judged idle and with busy processes beside the sandbox, side by side
in one run (bonforge/sandbox/README.md, "Infrastructure outcomes are never labels").

1. The HumanEval CodeT pool (``--samples`` per problem, ``--problems`` first problems): judged on an idle
   machine, then with ``--busy-per-core`` busy processes per core (default 8: 16 on 2 cores) beside it;
   compared verdict by verdict: flips (status or correct changed), ``infra_error`` on each side, wall time and
   candidate latency, the requests that ran again alone (and with what stretch). The target: 0 flips.
2. The twelve Library Checker packages (``library-checker`` under the data folder): every solution info.toml
   labels, judged idle and loaded, each verdict against info.toml (``pass``: passed; ``fail``: a failure other
   than sandbox_error; ``tle``: timeout; ``tle_ok``: passed or timeout) and against the other side. As in
   ``tests/builds/test_cp_packages.py``: solutions stop at their first failing test, factorial's limit is 2 s
   and factorize's 4 s (their too-slow solutions then fail fast), a recipe CPU cap of 10 s, 1 GiB, 1200 s a
   candidate; the wall factor is the default (2).

The machine's load average is printed before and after each side ("idle" is as idle as a shared machine
gets). The busy processes are pinned one core each, each in a session of its own (an autogroup), as in
``tests/sandbox/test_runner_wall.py``; they are killed on exit.

    python benchmarks/load_flips.py [--problems N] [--samples 8] [--busy-per-core 8] [--workers N]
                                    [--packages N] [--skip-codet] [--skip-lc]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc

from _common import DATA
from bonforge.judging.code import verify_code
from bonforge.sandbox import testlib
from bonforge.sandbox.check_host import close_check_hosts
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.image import build_image
from bonforge.sandbox.pool import SandboxPool
from bonforge.sources.code import import_codet_pool, load_humaneval
from bonforge.sources.problem_package import load_package, load_packages, package_candidates, package_folders

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))  # the tests' busy processes
import procs  # noqa: E402

LOWERED = {"factorial": "2.0", "factorize": "4.0"}  # as tests/builds/test_cp_packages.py (its docstring: why)


def busy(per_core: int):
    """``per_core`` busy processes on each core this process may use, each pinned there, in a session of its own."""
    return procs.busy(per_core, sorted(os.sched_getaffinity(0)))


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


class Spy:
    """The pool, counting the requests run again alone (they carry a ``stretch``) by stretch."""

    streams_outcomes = True

    def __init__(self, pool: SandboxPool):
        self.pool, self.alone = pool, Counter()

    def run(self, requests, on_outcome=None):
        self.alone.update(round(r["stretch"], 1) for r in requests if r.get("stretch") is not None)
        return self.pool.run(requests, on_outcome)


def judged(label: str, problems, cands, cfg: CodeVerifyConfig, pool: SandboxPool) -> dict:
    before = load()
    spy = Spy(pool)
    start = time.monotonic()
    rows = verify_code(problems, cands, cfg, pool=spy).to_pylist()
    seconds = time.monotonic() - start
    latency = sorted(r["latency_ms"] / 1000 for r in rows if r["latency_ms"] is not None)
    print(f"  {label:<7} {len(rows):>5} cands {seconds:>8.2f} s  latency median {statistics.median(latency):7.3f} s "
          f"max {latency[-1]:7.2f} s  infra_error {sum(r['status'] == 'infra_error' for r in rows):>3}  "
          f"runs alone {dict(spy.alone) or 0}  ({before} -> {load()})", flush=True)  # fmt: skip
    return {r["candidate_id"]: r for r in rows}


def compare(idle: dict, loaded: dict) -> int:
    """Print the flips between the two sides (status or correct); their number."""
    label = {cid: (r["status"], r["correct"]) for cid, r in loaded.items()}
    flips = [(cid, a, loaded[cid]) for cid, a in idle.items() if (a["status"], a["correct"]) != label[cid]]
    print(f"  flips idle -> loaded: {len(flips)} of {len(idle)}; by status: "
          f"{dict(Counter((a['status'], b['status']) for _, a, b in flips)) or '-'}")  # fmt: skip
    for cid, a, b in flips[:10]:
        print(f"    {cid}: {a['status']} -> {b['status']}: {(b['detail'] or a['detail'] or '')[:160]!r}")
    return len(flips)


def codet(args, image: str) -> None:
    data = DATA / "humaneval"
    problems = load_humaneval(data / "HumanEval.jsonl.gz")
    if args.problems is not None:
        problems = problems.slice(0, args.problems)
    cands = import_codet_pool(data / "codet_codegen16B_samples.jsonl", problems, n=args.samples)
    cfg = CodeVerifyConfig(pool_size=args.workers, image=image)
    print(f"CodeT pool: {problems.num_rows} problems x {args.samples} samples = {cands.num_rows} candidates, "
          f"{args.workers} containers, {cfg.time_limit_s:g} s limit (wall {cfg.wall_limit_s:g} s)", flush=True)
    with SandboxPool(cfg) as pool:
        pool.start()
        t = time.monotonic()  # untimed: the checker's container up, every problem's check planned
        verify_code(problems, cands.filter(pc.equal(cands.column("sample_index"), 0)), cfg, pool=pool)
        print(f"  (checks planned, one candidate a problem: {time.monotonic() - t:.1f} s, not timed)", flush=True)
        idle = judged("idle", problems, cands, cfg, pool)
        with busy(args.busy_per_core):
            loaded = judged("loaded", problems, cands, cfg, pool)
    close_check_hosts()
    compare(idle, loaded)


def packages(root: Path) -> Path:
    """A copy of the Library Checker packages with factorial's and factorize's limits lowered (``LOWERED``)."""
    copy = root / "packages"
    shutil.copytree(DATA / "library-checker", copy)
    for name, limit in LOWERED.items():
        info = copy / name / "info.toml"
        text = info.read_text()
        assert "timelimit = 10.0" in text, info
        info.write_text(text.replace("timelimit = 10.0", f"timelimit = {limit}", 1))
    return copy


def as_info_toml_says(expected: str, status: str) -> bool:
    return {"pass": status == "passed", "fail": status not in ("passed", "sandbox_error", "infra_error"),
            "tle": status == "timeout", "tle_ok": status in ("passed", "timeout")}[expected]  # fmt: skip


def library_checker(args, image: str) -> None:
    with tempfile.TemporaryDirectory(prefix="bonforge-load-flips-") as tmp:
        path = packages(Path(tmp))
        problems = load_packages(path, "library-checker", limit=args.packages)
        cands = package_candidates(path, problems, "package")
        expected = {}
        for folder in package_folders(path)[: args.packages]:
            sols = [s for s in load_package(folder, [path / "common"])[1] if s["expected"] is not None]
            expected.update({f"{folder.name}/package/{i}": (s["name"], s["expected"]) for i, s in enumerate(sols)})
        cfg = CodeVerifyConfig(pool_size=args.workers, image=image, extraction="raw", time_limit_s=10.0,
                               memory_mb=1024, candidate_wall_s=1200, stop_on_first_failure=True)  # fmt: skip
        print(f"Library Checker: {problems.num_rows} packages, {cands.num_rows} solutions labelled by info.toml "
              f"({dict(Counter(e for _, e in expected.values()))}), {args.workers} containers", flush=True)
        sides = {}
        with SandboxPool(cfg) as pool:
            pool.start()
            for side, per_core in (("idle", 0), ("loaded", args.busy_per_core)):
                # each side compiles the checkers (testlib.h: seconds of CPU each): none kept from the other
                os.environ["BONFORGE_HOME"] = str(Path(tmp) / side)
                testlib._binaries.clear()
                with busy(per_core):
                    rows = sides[side] = judged(side, problems, cands, cfg, pool)
                wrong = [(cid, *expected[cid], rows[cid]["status"], (rows[cid]["detail"] or "")[:160])
                         for cid in sorted(expected) if not as_info_toml_says(expected[cid][1], rows[cid]["status"])]
                print(f"  {side}: {len(expected) - len(wrong)} of {len(expected)} solutions as info.toml says; "
                      f"{dict(Counter(r['status'] for r in rows.values()))}", flush=True)  # fmt: skip
                for w in wrong:
                    print(f"    {w}", flush=True)
    compare(sides["idle"], sides["loaded"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, help="CodeT: only the first N HumanEval problems (default: all 164)")
    ap.add_argument("--samples", type=int, default=8, help="CodeT samples per problem")
    ap.add_argument("--busy-per-core", type=int, default=8)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="sandbox containers")
    ap.add_argument("--skip-codet", action="store_true")
    ap.add_argument("--packages", type=int, help="Library Checker: only the first N packages (default: all 12)")
    ap.add_argument("--skip-lc", action="store_true", help="skip the Library Checker packages")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still ends the busy processes and the pools
    image = build_image()
    print(f"{os.cpu_count()} cores, {load()}; busy processes when loaded: {args.busy_per_core} per core", flush=True)
    if not args.skip_codet:
        codet(args, image)
    if not args.skip_lc:
        library_checker(args, image)


if __name__ == "__main__":
    main()
