"""Math verification throughput: the verdicts stage (Ray workers, each with a killable math-verify child)
against a single-process math-verify loop, on the same 5,276 GSM8K (gold, prediction) pairs.

    python benchmarks/math_verify_throughput.py

Prints pairs/s of both and the ratio (target >= 1.7x on 2 cores). Ray's start-up is timed apart.
"""

from __future__ import annotations

import tempfile
import time

from _common import gsm8k_tables


def baseline(pairs: list[tuple[str, str]]) -> float:
    from math_verify import parse, verify

    t0 = time.perf_counter()
    for gold, pred in pairs:
        verify(parse(f"${gold}$"), parse(f"${pred}$"))
    return time.perf_counter() - t0


def main() -> None:
    from bonforge.engine import run_node
    from bonforge.engine.shards import ensure_ray
    from bonforge.stage import Ref
    from bonforge.storage.store import StageStore
    from bonforge.tasks import verify
    from bonforge.tasks.verify_math import extract_answer, gold_answer

    recipe, problems, cands = gsm8k_tables()
    cfg = recipe.verify.math
    gold = dict(zip(problems.column("problem_id").to_pylist(), problems.column("answer").to_pylist()))
    pairs = [(gold_answer(gold[p], cfg), extract_answer(t, cfg))
             for p, t in zip(cands.column("problem_id").to_pylist(), cands.column("text").to_pylist())]
    pairs = [(g, p) for g, p in pairs if p is not None]

    t0 = time.perf_counter()
    ensure_ray()
    ray_start = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        store = StageStore(tmp)
        refs = [Ref(stage, stage, store.put(stage, stage, table, version="1", config={}, upstream={}))
                for stage, table in (("problems", problems), ("candidates", cands))]
        t0 = time.perf_counter()  # the stage alone, from its committed inputs
        man = run_node(store, verify.node(recipe, *refs, {"math"}))
        ours = time.perf_counter() - t0
    base = baseline(pairs)
    n = man["rows"]
    print(f"pairs: {len(pairs)} checked ({n} candidates incl. extraction); Ray start {ray_start:.1f}s (not counted)")
    print(f"single-process math-verify loop : {len(pairs) / base:8.1f} pairs/s  ({base:.1f}s)")
    print(f"bonforge verdicts stage (Ray)   : {n / ours:8.1f} pairs/s  ({ours:.1f}s)")
    print(f"ratio: {base / ours:.2f}x  (target >= 1.7x on 2 cores)")


if __name__ == "__main__":
    main()
