"""Orchestration cost of a whole build, on the GSM8K recipe with a fresh store:

* DAG wall time (the `bonforge run` process, start to exit) against the sum of the stages' own compute
  time (each stage's wall time inside the runner, from its manifest): target wall <= 1.3 x compute + 15 s;
* a cached re-run (every stage committed) against the first run: target <= 10 %.

    python benchmarks/dag_overhead.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import DATA, GSM8K_RECIPE


def run(store: str) -> float:
    env = {**os.environ, "BONFORGE_DATA": str(DATA), "BONFORGE_QUIET": "1"}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bonforge.cli", "run", str(GSM8K_RECIPE), "--store", store], env=env,
                   check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    with tempfile.TemporaryDirectory() as store:
        first = run(store)
        cached = run(store)
        computed = [json.loads(p.read_text()) for p in Path(store, "stages").glob("*/*/manifest.json")]
        compute = sum(m["timings"]["wall_s"] for m in computed)
    print(f"stages computed: {len(computed)}; their compute time: {compute:.1f}s")
    print(f"first run wall: {first:.1f}s = {(first - 15) / compute:.2f} x compute + 15 s "
          f"(overhead {first - compute:.1f}s; target <= 1.3x + 15 s)")
    print(f"cached re-run:  {cached:.1f}s = {100 * cached / first:.1f} % of the first run (target <= 10 %)")


if __name__ == "__main__":
    main()
