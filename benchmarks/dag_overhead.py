"""Orchestration cost of a whole build, on the GSM8K recipe with a fresh store, measured in one run:

* the first build as `bonforge run` (a subprocess, start to exit), split into: start (imports, Prefect's
  temporary server and Ray, started side by side), the DAG itself (the run record's wall time) and the
  report; the DAG's wall time is compared with the sum of the stages' own compute time (each stage's wall
  time inside the runner, from its manifest): targets DAG <= 1.3 x compute, start <= 15 s;
* a cached re-run (every stage committed) against the first run: target <= 10 %.

    python benchmarks/dag_overhead.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import DATA, GSM8K_RECIPE


def run(store: str) -> tuple[float, str]:
    env = {**os.environ, "BONFORGE_DATA": str(DATA), "BONFORGE_QUIET": "1"}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "bonforge.cli", "run", str(GSM8K_RECIPE), "--store", store],
                         env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - t0, out.stdout + out.stderr


def main() -> None:
    with tempfile.TemporaryDirectory() as store:
        first, log = run(store)
        cached, _ = run(store)
        record = json.loads(sorted(Path(store, "runs").glob("*.json"))[0].read_text())  # the first run
        computed = [json.loads(p.read_text()) for p in Path(store, "stages").glob("*/*/manifest.json")]
        report = any(Path(store, "reports").glob("*/report.html"))
    compute = sum(m["timings"]["wall_s"] for m in computed)
    dag = record["wall_s"]
    rest = first - dag
    print(f"stages computed: {len(computed)}; the sum of their compute time: {compute:.1f}s")
    print(f"DAG wall time: {dag:.1f}s = {dag / compute:.2f} x compute (target <= 1.3x)")
    print(f"first `bonforge run`: {first:.1f}s = start + report + exit {rest:.1f}s + DAG {dag:.1f}s "
          f"(start target <= 15 s; report written: {report})")
    print(f"cached re-run: {cached:.1f}s = {100 * cached / first:.1f} % of the first run (target <= 10 %)")
    if re.search(r"error", log, re.I):
        print("note: the first run logged errors:", log[-500:])


if __name__ == "__main__":
    main()
