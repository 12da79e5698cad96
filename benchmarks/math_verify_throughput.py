"""Math verification throughput: the verdicts stage (Ray workers, each with a killable math-verify child)
against a single-process math-verify loop, on two pools:

- GSM8K: the 5,276 labelled GPT-3 solutions (recipe pattern ``A: x``; the loop parses the same captured
  values);
- MATH-500: each reference solution against its answer, and the same solution with a perturbed boxed
  answer (1,000 candidates, LaTeX answers; the loop parses ``$answer$`` and the whole solution).

    python benchmarks/math_verify_throughput.py [--problems N]   (default: every problem of both pools)

Prints candidates/s of both and the ratio per pool (target >= 1.7x on 2 cores), and both ways' agreement
with the labels. The two ways alternate over chunks of the pool (timings on a shared machine drift).
Ray's start and the checkers' start (warm-up shards) are timed apart.
"""

from __future__ import annotations

import os
import re
import tempfile
import time

from _common import gsm8k_tables, math500_tables

CHUNK_ROWS = 512  # candidates per alternation of the two ways (two verdict shards)


def cpu_seconds() -> tuple[float, float]:
    """CPU time of this process and all its descendants (Ray's processes, the checkers), and of the
    checker processes alone."""
    import psutil

    procs = [psutil.Process()]
    procs += procs[0].children(recursive=True)
    total = checkers = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
            if "_child_main" in " ".join(p.cmdline()):
                checkers += t.user + t.system
        except psutil.Error:
            pass
    return total, checkers


def loop(pairs: list[tuple[str, str]], targets) -> tuple[float, float, list[bool]]:
    """math-verify as a user calls it: parse gold, parse prediction, verify (gold first), one at a time."""
    from math_verify import parse, verify

    t0, c0 = time.perf_counter(), time.process_time()
    out = [verify(parse(gold), parse(pred, targets)) for gold, pred in pairs]
    return time.perf_counter() - t0, time.process_time() - c0, out


def stage(problems, cands, cfg, tmp: str, name: str):
    """The verdicts stage alone, as the engine runs it, from committed inputs (conformed to the stage schemas,
    as the load stages write them: verify reads the columns it judges, ``domain`` among them)."""
    import pyarrow as pa

    from bonforge.engine import run_node
    from bonforge.schema import CANDIDATES, PROBLEMS, conform
    from bonforge.stage import Ref
    from bonforge.storage.store import StageStore
    from bonforge.stages import verify

    store = StageStore(tmp)
    refs = {}
    if "domain" not in problems.column_names:
        problems = problems.append_column("domain", pa.array(["math"] * problems.num_rows))
    if "sample_index" not in cands.column_names:
        cands = cands.append_column("sample_index", pa.array([0] * cands.num_rows, pa.int32()))
    for stage, table in (("problems", conform(problems, PROBLEMS)), ("candidates", conform(cands, CANDIDATES))):
        store.write_shard(stage, f"{name}-{stage}", 0, table)
        refs[stage] = Ref(stage, f"{name}-{stage}", store.commit(stage, f"{name}-{stage}", 1, version="bench",
                                                                  config={}, upstream={}))
    node = verify.MATH.bind(verify.VerifyParams(cfg), refs)
    t0, (c0, k0) = time.perf_counter(), cpu_seconds()
    run_node(store, node)
    c1, k1 = cpu_seconds()
    return time.perf_counter() - t0, (c1 - c0, k1 - k0), store.read("verdicts", node.key)


def compare(title, problems, cands, cfg, pairs_of, targets, labels, tmp: str) -> None:
    """Both ways on the same chunks of whole problems, alternating, so that both see the same load on a
    shared machine; each chunk's problems are new to both (no cache carries over)."""
    from bonforge.engine.shards import plan_shards

    base = ours = base_cpu = ours_cpu = checker_cpu = 0.0
    same_ours = same_loop = 0
    for i, chunk in enumerate(plan_shards(cands, CHUNK_ROWS)):
        secs, (cpu, checkers), verdicts = stage(problems, chunk, cfg, tmp, f"{title}-{i}")
        ours, ours_cpu, checker_cpu = ours + secs, ours_cpu + cpu, checker_cpu + checkers
        same_ours += sum(r["correct"] == labels[r["candidate_id"]] for r in verdicts.to_pylist())
        secs, cpu, out = loop(pairs_of(chunk), targets)
        base, base_cpu = base + secs, base_cpu + cpu
        same_loop += sum(ok == labels[c] for ok, c in zip(out, chunk.column("candidate_id").to_pylist()))
    n = cands.num_rows
    print(f"{title}: {n} candidates")
    print(f"  single-process math-verify loop : {n / base:8.1f} candidates/s  ({base:.1f}s; CPU {base_cpu:.1f}s)")
    print(f"  bonforge verdicts stage (Ray)   : {n / ours:8.1f} candidates/s  ({ours:.1f}s; CPU {ours_cpu:.1f}s "
          f"in all its processes, {checker_cpu:.1f}s in the checkers)")
    print(f"  ratio: {base / ours:.2f}x  (target >= 1.7x on 2 cores); CPU per candidate vs the loop: checkers "
          f"{checker_cpu / base_cpu:.2f}, all {ours_cpu / base_cpu:.2f}")
    print(f"  agreement with the labels: verdicts {same_ours}/{n}, loop {same_loop}/{n}")


def first(problems, cands, n: int | None):
    """The first ``n`` problems of a pool and their candidates (all with ``None``)."""
    import pyarrow.compute as pc

    if n is None:
        return problems, cands
    problems = problems.slice(0, n)
    return problems, cands.filter(pc.is_in(cands.column("problem_id"), problems.column("problem_id")))


def main() -> None:
    import argparse
    import logging

    import pyarrow as pa
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    from bonforge.config import MathVerifyConfig
    from bonforge.runtime.cluster import ensure_ray

    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, help="only the first N problems of each pool (a smoke run: 4)")
    args = ap.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    recipe, g_problems, g_cands = gsm8k_tables()
    g_problems, g_cands = first(g_problems, g_cands, args.problems)
    g_cfg = recipe.verify.math
    g_labels = dict(zip(g_cands.column("candidate_id").to_pylist(), g_cands.column("reference_correct").to_pylist()))
    m_problems, m_cands, m_labels = math500_tables()
    m_problems, m_cands = first(m_problems, m_cands, args.problems)

    def captured(text: str) -> str:
        for pattern in g_cfg.patterns:
            if found := re.findall(pattern, text, re.MULTILINE):
                return found[-1]
        return text

    def pairs(problems, gold_form):
        gold = dict(zip(problems.column("problem_id").to_pylist(), problems.column("answer").to_pylist()))
        return lambda chunk: [gold_form(gold[p], t) for p, t in zip(chunk.column("problem_id").to_pylist(),
                                                                    chunk.column("text").to_pylist())]

    # Ray runs its workers at nice 15: on a machine shared with other work that would time the neighbours,
    # not the stage. Both ways get the loop's priority.
    os.environ.setdefault("RAY_worker_niceness", "0")
    t0 = time.perf_counter()
    ensure_ray()
    ray_start = time.perf_counter() - t0
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (with a higher load the wall-clock "
          "ratio measures this session's CPU share, not the stage)")
    with tempfile.TemporaryDirectory() as tmp:
        n = 600 if args.problems is None else 8  # three shards of problems used nowhere else: a checker per worker
        ids = [f"w{i:03d}" for i in range(n)]
        warm = pa.table({"candidate_id": ids, "problem_id": ids, "teacher": ["w"] * n,
                         "text": [f"so $x = {i}$" for i in range(n)]})
        warm_s, *_ = stage(pa.table({"problem_id": ids, "answer": [str(i) for i in range(n)]}), warm,
                          MathVerifyConfig(), tmp, "warm")
        print(f"Ray start {ray_start:.1f}s, warm-up shards incl. checker start {warm_s:.1f}s (neither counted)")
        compare("GSM8K pool", g_problems, g_cands, g_cfg,
                pairs(g_problems, lambda gold, text: (captured(gold), captured(text))),
                [LatexExtractionConfig(), ExprExtractionConfig()], g_labels, tmp)
        compare("MATH-500 reference + perturbed", m_problems, m_cands, MathVerifyConfig(),
                pairs(m_problems, lambda gold, text: (f"${gold}$", text)),
                [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()], m_labels, tmp)


if __name__ == "__main__":
    main()
