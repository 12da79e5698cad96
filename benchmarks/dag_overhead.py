"""Orchestration cost of a whole build, on the GSM8K recipe with a fresh store, measured in one run:

* the first build, in a fresh process, split into start (imports, Prefect's temporary server; a local
  Ray starts inside the DAG, once a stage first maps several shards), the DAG (the Prefect flow) and the
  report; the DAG's wall time is compared with the sum of the stages' own compute time (each stage's wall
  time inside the runner, from its manifest):
  targets DAG <= 1.3 x compute, start <= 15 s;
* a cached re-run (`bonforge run` with every stage committed) against the first run (`bonforge run` on a
  fresh store): target <= 10 %;
* a filter change (`--set filter.max_pass_rate=...`: problem_stats and genselect recomputed, the rest
  reused) without and with the warm services of `bonforge up` (three changes with them: the median and the
  range), side by side: target <= 3 s with them; and the no-op rebuild without and with them: target
  <= 1 s. The load average is printed with the figures (this machine is shared). GSM8K's pass rates are
  multiples of 1/4, so each change here keeps a set of problems that no build before it kept: its report
  draws the figures of genselect and the stage timings anew (the figures of unchanged data are reused).

    python benchmarks/dag_overhead.py [--problems N] [--changes K] [--warm-home DIR]   (default: all 1,319
    problems, and the three filter changes with the warm services of a `bonforge up` of its own; a smoke run:
    12 problems, the fewest first problems that each filter change keeps some of, and one change: the median
    of one, with the warm services already up in DIR, a ``BONFORGE_HOME``: neither started nor stopped here)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import DATA, GSM8K_RECIPE, REPO

PHASES = r"""
import json, sys, time
t0 = time.perf_counter()
from bonforge.config import load_recipe
from bonforge import services
from bonforge.engine.prefect import build_flow
from bonforge.flows.build import dag
from bonforge.report import report_after_build
recipe = load_recipe(sys.argv[1], sys.argv[4:]); store = sys.argv[2]
t1 = time.perf_counter()
with services.for_build(recipe):
    t2 = time.perf_counter(); record = build_flow(dag, recipe, store, str(sys.argv[3]))
    t3 = time.perf_counter()
t4 = time.perf_counter(); report_after_build(store, record)
t5 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "services": t2 - t1, "flow": t3 - t2, "dag": record["wall_s"], "stop": t4 - t3,
                  "report": t5 - t4}))
"""


def python(*argv: str) -> str:
    """The output of ``python argv`` with this benchmark's environment; its error output, and an exit, if it fails."""
    out = subprocess.run([sys.executable, *argv], env=ENV, capture_output=True, text=True, cwd=REPO)
    if out.returncode:
        sys.exit(f"{' '.join(argv)} failed with exit code {out.returncode}:\n{out.stderr[-3000:]}")
    return out.stdout


def cli(*args: str) -> float:
    t0 = time.perf_counter()
    python("-m", "bonforge.cli", *args)
    return time.perf_counter() - t0


def build(store: str, *overrides: str) -> float:
    overrides = (*SIZE, *overrides)
    return cli("run", str(GSM8K_RECIPE), "--store", store, *(a for o in overrides for a in ("--set", o)))


SIZE: list[str] = []  # the recipe overrides of every build: problems.limit with --problems


ENV = {
    **os.environ,
    "BONFORGE_DATA": str(DATA),
    "BONFORGE_QUIET": "1",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, help="only the first N problems of the recipe (default: all)")
    ap.add_argument("--changes", type=int, choices=(1, 2, 3), default=3,
                    help="how many of the three filter changes to time with the warm services (default: 3)")
    ap.add_argument("--warm-home", type=Path,
                    help="the BONFORGE_HOME of a `bonforge up` already running: its warm services serve the warm "
                         "builds (default: this benchmark's own `bonforge up` and `down`)")
    args = ap.parse_args()
    if args.problems is not None:
        SIZE.append(f"problems.limit={args.problems}")
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b, tempfile.TemporaryDirectory() as h:
        ENV["BONFORGE_HOME"] = h  # the warm services of this benchmark only
        ENV["PREFECT_HOME"] = str(Path(h, "prefect"))  # and its own Prefect database (migrated by the first build)
        out = python("-c", PHASES, str(GSM8K_RECIPE), a, str(GSM8K_RECIPE.parent), *SIZE)
        phases = json.loads(out.strip().splitlines()[-1])
        compute = sum(
            json.loads(p.read_text())["timings"]["wall_s"] for p in Path(a, "stages").glob("*/*/manifest.json")
        )
        first = build(b)
        cached = build(b)
        knob_cold = build(b, "filter.max_pass_rate=0.75")
        noop_cold = build(b, "filter.max_pass_rate=0.75")
        if args.warm_home:
            ENV["BONFORGE_HOME"] = str(args.warm_home)
        else:
            cli("up")
        try:
            changes = (("filter.max_pass_rate=0.25",), ("filter.min_pass_rate=0.25",),
                       ("filter.min_pass_rate=0.25", "filter.max_pass_rate=0.75"))[:args.changes]
            knob_warm = sorted(build(b, *change) for change in changes)
            noop_warm = build(b, *changes[-1])
        finally:
            if not args.warm_home:
                cli("down")
    median = knob_warm[len(knob_warm) // 2]
    print(
        f"start: imports {phases['imports']:.1f}s + Prefect's server {phases['services']:.1f}s "
        f"= {phases['imports'] + phases['services']:.1f}s (target <= 15 s)"
    )
    print(
        f"DAG: {phases['dag']:.1f}s for {compute:.1f}s of stage compute = {phases['dag'] / compute:.2f}x "
        f"(target <= 1.3x); the Prefect flow around it {phases['flow']:.1f}s; "
        f"stopping the server {phases['stop']:.1f}s; report {phases['report']:.1f}s"
    )
    print(
        f"`bonforge run`: first {first:.1f}s, cached re-run {cached:.1f}s = {100 * cached / first:.1f} % "
        f"(target <= 10 %)"
    )
    print(
        f"filter change (problem_stats + genselect recomputed), `bonforge run` start to exit: {knob_cold:.1f}s "
        f"without `bonforge up`, {median:.1f}s with it (median of {len(knob_warm)}, {knob_warm[0]:.1f}-"
        f"{knob_warm[-1]:.1f}s) = {median / knob_cold:.2f}x (target <= 3 s); no-op rebuild {noop_cold:.1f}s without, "
        f"{noop_warm:.1f}s with it (target <= 1 s); load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )


if __name__ == "__main__":
    main()
