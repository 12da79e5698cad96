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


def child(root: str, keys: tuple[str, str], window_bytes: int | None) -> dict:
    """Run the verdicts stage of the store at ``root`` (problems and candidates committed under ``keys``), its
    judging stubbed, in this process; returns how much the peak RSS grew while it ran (MB: the kernel's
    high-water mark, reset just before), its wall time, rows and rows computed. ``window_bytes``: the batches
    and reuse windows of that many bytes (code that has them)."""
    import dataclasses
    import re
    import time

    import pyarrow as pa

    from bonforge.config import Recipe
    from bonforge.engine import run_node
    from bonforge.schema import VERDICTS, conform
    from bonforge.stage import Ref
    from bonforge.stages import verify
    from bonforge.storage.store import StageStore

    if window_bytes:
        from bonforge.engine import shards, streams

        streams.BATCH_BYTES = shards.WINDOW_BYTES = window_bytes
    store = StageStore(root)
    src = {"path": "x.jsonl"}
    recipe = Recipe.model_validate({"name": "s", "problems": {"name": "s", "source": src}, "export": {"name": "s"},
                                    "teachers": [{"name": "t", "engine": "pool", "source": src}]})

    def judged(candidates, problems, cfg, todo=None, **_):  # every candidate wrong: the engine's memory only
        n = candidates.num_rows
        return conform(pa.table({
            "candidate_id": candidates.column("candidate_id"), "problem_id": candidates.column("problem_id"),
            "teacher": candidates.column("teacher"), "correct": [False] * n, "reward": [0.0] * n,
            "status": ["wrong_answer"] * n}), VERDICTS)

    problems, candidates = (Ref(name, k, store.manifest(name, k)) for name, k in zip(("problems", "candidates"), keys))
    node = verify.node(recipe, problems, candidates, {"math"})
    node = dataclasses.replace(node, stage=dataclasses.replace(node.stage, compute=judged, executor="local"))

    def status(field: str) -> float:
        return int(re.search(field + r":\s+(\d+)", open("/proc/self/status").read()).group(1)) / 1024

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    before, t0 = status("VmRSS"), time.perf_counter()
    man = run_node(store, node)
    return {"grew_mb": status("VmHWM") - before, "wall_s": time.perf_counter() - t0, "rows": man["rows"],
            "rows_computed": man.get("rows_computed")}


def run_child(code: Path, root: str, keys: tuple[str, str] = ("k", "k"), window_bytes: int | None = None) -> dict:
    """``child`` in a process of its own, importing bonforge from the checkout ``code``."""
    argv = [sys.executable, __file__, "--child", root, "--keys", *keys] + (
        ["--window-bytes", str(window_bytes)] if window_bytes else [])
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run(argv, env=env, cwd=code, check=True, capture_output=True, text=True, timeout=1200)
    return json.loads(out.stdout.strip().splitlines()[-1])


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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--baseline", type=Path)
    p.add_argument("--child", metavar="STORE", help="run the stage of this store here (what the sizes run)")
    p.add_argument("--keys", nargs=2, default=["k", "k"], metavar=("PROBLEMS", "CANDIDATES"))
    p.add_argument("--window-bytes", type=int)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, tuple(args.keys), args.window_bytes)))
        return
    codes = ([("baseline", args.baseline.resolve())] if args.baseline else []) + [("this code", REPO)]
    print(f"verdicts stage, judging stubbed, {PER} candidates of 400 characters per problem "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    first: dict[str, float] = {}
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            make_store(Path(tmp), n)
            for name, code in codes:
                out = run_child(code, tmp)
                shutil.rmtree(Path(tmp) / "stages" / "verdicts")  # the next code computes it again
                grew = out["grew_mb"]
                first.setdefault(name, grew)
                print(f"  {name:<9} {n:>9,} problems ({out['rows']:>10,} verdicts): peak RSS +{grew:7.0f} MB "
                      f"({grew / first[name]:.2f}x the first size), {out['wall_s']:6.1f} s", flush=True)


if __name__ == "__main__":
    main()
