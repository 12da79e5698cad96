"""Math verification throughput: the verdicts stage (Ray workers, each with a killable math-verify child)
against a single-process math-verify loop, on two pools:

- GSM8K: the 5,276 labelled GPT-3 solutions (recipe pattern ``A: x``; the loop parses the same captured
  values);
- MATH-500: each reference solution against its answer, and the same solution with a perturbed boxed
  answer (1,000 candidates, LaTeX answers; the loop parses ``$answer$`` and the whole solution).

    python benchmarks/math_verify_throughput.py

Prints candidates/s of both and the ratio per pool (target >= 1.7x on 2 cores), and the verdicts' agreement
with the labels. Ray's start and the checkers' start (a warm-up shard per worker) are timed apart.
"""

from __future__ import annotations

import re
import tempfile
import time
from functools import partial

from _common import gsm8k_tables, math500_tables


def loop(pairs: list[tuple[str, str]], targets) -> tuple[float, list[bool]]:
    """math-verify as a user calls it: parse gold, parse prediction, verify (gold first), one at a time."""
    from math_verify import parse, verify

    t0 = time.perf_counter()
    out = [verify(parse(gold), parse(pred, targets)) for gold, pred in pairs]
    return time.perf_counter() - t0, out


def stage(problems, cands, cfg, tmp: str, name: str):
    from bonforge.flows.stages import VERIFY_SHARD_ROWS, _verify_math_shard
    from bonforge.runner import run_stage
    from bonforge.storage.store import StageStore

    store = StageStore(tmp)
    t0 = time.perf_counter()
    man = run_stage(store, "verdicts", name, version="bench", config={}, upstream={}, table=cands,
                    compute=partial(_verify_math_shard, cfg=cfg), context={"problems": problems},
                    shard_rows=VERIFY_SHARD_ROWS, executor="ray")
    return time.perf_counter() - t0, man, store.read("verdicts", name)


def report(title: str, n: int, base: float, ours: float, agree: str) -> None:
    print(f"{title}: {n} candidates")
    print(f"  single-process math-verify loop : {n / base:8.1f} candidates/s  ({base:.1f}s)")
    print(f"  bonforge verdicts stage (Ray)   : {n / ours:8.1f} candidates/s  ({ours:.1f}s)")
    print(f"  ratio: {base / ours:.2f}x  (target >= 1.7x on 2 cores); {agree}")


def agreement(verdicts, labels: dict[str, bool]) -> str:
    rows = verdicts.select(["candidate_id", "correct"]).to_pylist()
    same = sum(r["correct"] == labels[r["candidate_id"]] for r in rows)
    return f"verdicts agree with the labels on {same}/{len(rows)}"


def main() -> None:
    import logging

    import pyarrow as pa
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    from bonforge.config import MathVerifyConfig
    from bonforge.runner import ensure_ray

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    recipe, g_problems, g_cands = gsm8k_tables()
    g_cfg = recipe.verify.math
    g_labels = dict(zip(g_cands.column("candidate_id").to_pylist(), g_cands.column("reference_correct").to_pylist()))
    m_problems, m_cands, m_labels = math500_tables()
    m_cfg = MathVerifyConfig()

    def captured(text: str) -> str:
        for pattern in g_cfg.patterns:
            if found := re.findall(pattern, text, re.MULTILINE):
                return found[-1]
        return text

    g_gold = dict(zip(g_problems.column("problem_id").to_pylist(), g_problems.column("answer").to_pylist()))
    g_pairs = [(captured(g_gold[p]), captured(t))
               for p, t in zip(g_cands.column("problem_id").to_pylist(), g_cands.column("text").to_pylist())]
    m_gold = dict(zip(m_problems.column("problem_id").to_pylist(), m_problems.column("answer").to_pylist()))
    m_pairs = [(f"${m_gold[p]}$", t)
               for p, t in zip(m_cands.column("problem_id").to_pylist(), m_cands.column("text").to_pylist())]

    t0 = time.perf_counter()
    ensure_ray()
    ray_start = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        ids = [f"w{i:03d}" for i in range(600)]  # three shards of problems used nowhere else: a checker per worker
        warm = pa.table({"candidate_id": ids, "problem_id": ids, "teacher": ["w"] * 600,
                         "text": [f"so $x = {i}$" for i in range(600)]})
        warm_s, *_ = stage(pa.table({"problem_id": ids, "answer": [str(i) for i in range(600)]}), warm, m_cfg,
                           tmp, "warm")
        g_ours, _, g_verdicts = stage(g_problems, g_cands, g_cfg, tmp, "gsm8k")
        m_ours, _, m_verdicts = stage(m_problems, m_cands, m_cfg, tmp, "math500")
    g_base, _ = loop(g_pairs, [LatexExtractionConfig(), ExprExtractionConfig()])
    m_base, m_loop = loop(m_pairs, [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()])
    loop_agree = sum(ok == m_labels[c] for ok, c in zip(m_loop, m_cands.column("candidate_id").to_pylist()))
    print(f"Ray start {ray_start:.1f}s, warm-up shards incl. checker start {warm_s:.1f}s (neither counted)")
    report("GSM8K pool", g_cands.num_rows, g_base, g_ours, agreement(g_verdicts, g_labels))
    report("MATH-500 reference + perturbed", m_cands.num_rows, m_base, m_ours,
           agreement(m_verdicts, m_labels) + f" (the loop: {loop_agree}/{m_cands.num_rows})")


if __name__ == "__main__":
    main()
