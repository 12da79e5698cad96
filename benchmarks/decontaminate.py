"""The decontamination stage's compute on 100,000 synthetic problems against 1,000 benchmark items
(target: under 10 s on 2 cores), side by side with a plain-Python n-gram set over the same texts, and a
check that both drop the same problems.

Texts are words drawn from a 20,000-word vocabulary (Zipf-like), 30-120 words each; 200 problems carry
one 13-word span copied from a random benchmark item, with case and whitespace changed. Wall and CPU
time are printed: on a machine shared with other work the CPU time is what the stage costs.

    python benchmarks/decontaminate.py [--problems 100000] [--items 1000]
"""

from __future__ import annotations

import argparse
import re
import time
import unicodedata

import numpy as np
import pyarrow as pa

from bonforge.stages.decontaminate import decontaminate

N = 13


def synthetic(n_problems: int, n_items: int, planted: int, seed: int = 0) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(20_000)])
    weights = 1 / np.arange(1, len(vocab) + 1)
    weights /= weights.sum()

    def texts(n: int) -> list[list[str]]:
        lengths = rng.integers(30, 121, size=n)
        flat = vocab[rng.choice(len(vocab), size=int(lengths.sum()), p=weights)]
        return [list(x) for x in np.split(flat, np.cumsum(lengths)[:-1])]

    items, problems = texts(n_items), texts(n_problems)
    for p in rng.choice(n_problems, size=planted, replace=False):
        item = items[rng.integers(n_items)]
        at = rng.integers(0, len(item) - N + 1)
        problems[p][5:5] = [w.upper() for w in item[at : at + N]]
    bench = pa.table({"id": [f"b{i}" for i in range(n_items)], "text": ["  ".join(t) for t in items]})
    probs = pa.table({"problem_id": [f"p{i:06d}" for i in range(n_problems)],
                      "question": [" ".join(t) + "?" for t in problems]})  # fmt: skip
    return probs, bench


def python_baseline(problems: pa.Table, bench: pa.Table) -> set[str]:
    """The textbook version: a set of word tuples, one Python loop over every window."""

    def words(text: str) -> list[str]:
        return re.sub(r"[\W_]+", " ", unicodedata.normalize("NFKC", text).lower()).split()

    grams = set()
    for text in bench.column("text").to_pylist():
        w = words(text)
        grams.update(tuple(w[i : i + N]) for i in range(len(w) - N + 1))
    hit = set()
    for pid, text in zip(problems.column("problem_id").to_pylist(), problems.column("question").to_pylist()):
        w = words(text)
        if any(tuple(w[i : i + N]) in grams for i in range(len(w) - N + 1)):
            hit.add(pid)
    return hit


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=100_000)
    ap.add_argument("--items", type=int, default=1_000)
    ap.add_argument("--planted", type=int, default=200)
    args = ap.parse_args()
    problems, bench = synthetic(args.problems, args.items, args.planted)
    words = sum(len(t.split()) for t in problems.column("question").to_pylist())
    print(f"{args.problems:,} problems ({words:,} words) vs {args.items:,} benchmark items, {N}-grams")

    t0, c0 = time.perf_counter(), time.process_time()
    out = decontaminate(problems, {"bench": bench}, ngram=N, dedup=True)
    stage_s, stage_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    baseline = python_baseline(problems, bench)
    base_s, base_cpu = time.perf_counter() - t0, time.process_time() - c0

    found = {p for p, r in zip(out.column("problem_id").to_pylist(), out.column("reason").to_pylist())
             if r == "benchmark"}  # fmt: skip
    print(f"stage (vectorised, with dedup): {stage_s:6.2f} s wall, {stage_cpu:6.2f} s CPU   dropped {len(found)} "
          f"for overlap, {out.num_rows - len(found)} duplicates")
    print(f"plain-Python n-gram set:        {base_s:6.2f} s wall, {base_cpu:6.2f} s CPU   dropped {len(baseline)}")
    print(f"ratio python / stage: {base_s / stage_s:.1f}x wall, {base_cpu / stage_cpu:.1f}x CPU   same problems "
          f"dropped: {found == baseline}   target stage < 10 s: {'met' if stage_s < 10 else 'MISSED'}")


if __name__ == "__main__":
    main()
