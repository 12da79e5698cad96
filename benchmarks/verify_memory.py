"""The verdicts stage's driver memory at two sizes: N problems x 16 candidates of 400 characters, the stage run
in a process of its own with its judging stubbed (every candidate wrong: the engine's memory, not
math-verify's), in process, row reuse on. Prints the process's peak RSS growth while the stage runs, its wall
time and rows; with ``--baseline DIR`` (another checkout, e.g. ``git archive main``) that code's run of the same
store first.

    python benchmarks/verify_memory.py [--sizes 10000 100000] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PER = 16

CHILD = r"""
import dataclasses, json, re, sys, time
import pyarrow as pa
from bonforge.config import Recipe
from bonforge.engine import run_node
from bonforge.schema import VERDICTS, conform
from bonforge.stage import Ref
from bonforge.stages import verify
from bonforge.storage.store import StageStore

store = StageStore(sys.argv[1])
ref = lambda name: Ref(name, "k", store.manifest(name, "k"))
src = {"path": "x.jsonl"}
recipe = Recipe.model_validate({"name": "s", "problems": {"name": "s", "source": src}, "export": {"name": "s"},
                                "teachers": [{"name": "t", "engine": "pool", "source": src}]})
def judged(candidates, problems, cfg, todo=None):
    n = candidates.num_rows
    return conform(pa.table({"candidate_id": candidates.column("candidate_id"),
                             "problem_id": candidates.column("problem_id"), "teacher": candidates.column("teacher"),
                             "correct": [False] * n, "reward": [0.0] * n, "status": ["wrong_answer"] * n}), VERDICTS)
node = verify.node(recipe, ref("problems"), ref("candidates"), {"math"})
node = dataclasses.replace(node, stage=dataclasses.replace(node.stage, compute=judged, executor="local"))
status = lambda field: int(re.search(field + r":\s+(\d+)", open("/proc/self/status").read()).group(1)) / 1024
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM to the current RSS
before, t0 = status("VmRSS"), time.perf_counter()
man = run_node(store, node)
print(json.dumps([status("VmHWM") - before, time.perf_counter() - t0, man["rows"]]))
"""


def make_store(root: Path, n: int) -> None:
    import numpy as np
    import pyarrow as pa

    from bonforge.schema import CANDIDATES, PROBLEMS, conform
    from bonforge.storage.store import StageStore

    store = StageStore(root)
    pids = np.array([f"syn/{i:07d}" for i in range(n)], dtype=object)
    store.write_shard("problems", "k", 0, conform(pa.table({
        "problem_id": pids, "domain": ["math"] * n, "answer": ["7"] * n,
        "question": [f"What is {p}?" for p in pids]}), PROBLEMS))
    store.commit("problems", "k", 1, version="1", config={}, upstream={})
    filler = "so we add the apples and get a total of seven, " * 9
    step = 100_000  # problems per file, like compacted candidates
    for f, lo in enumerate(range(0, n, step)):
        pid = np.repeat(pids[lo:lo + step], PER)
        idx = np.tile(np.arange(PER), len(pid) // PER)
        cid = [f"{p}/t/{i:02d}" for p, i in zip(pid, idx)]
        store.write_shard("candidates", "k", f, conform(pa.table({
            "candidate_id": cid, "problem_id": pid, "teacher": ["t"] * len(pid), "sample_index": idx,
            "text": [f"{c}: {filler}"[:400] for c in cid]}), CANDIDATES))
    store.commit("candidates", "k", (n + step - 1) // step, version="1", config={}, upstream={})


def run(code: Path, root: Path) -> list[float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(root)], env={**os.environ, "PYTHONPATH": str(code)},
                         cwd=code, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--baseline", type=Path)
    args = p.parse_args()
    codes = ([("baseline", args.baseline.resolve())] if args.baseline else []) + [("this code", REPO)]
    print(f"verdicts stage, judging stubbed, {PER} candidates of 400 characters per problem "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    first: dict[str, float] = {}
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            make_store(Path(tmp), n)
            for name, code in codes:
                grew, wall, rows = run(code, Path(tmp))
                shutil.rmtree(Path(tmp) / "stages" / "verdicts")  # the next code computes it again
                first.setdefault(name, grew)
                print(f"  {name:<9} {n:>9,} problems ({rows:>10,} verdicts): peak RSS +{grew:7.0f} MB "
                      f"({grew / first[name]:.2f}x the first size), {wall:6.1f} s", flush=True)


if __name__ == "__main__":
    main()
