"""Near-duplicate dedup (the contamination stage's ``near_duplicates``) on 1,000,000 synthetic problems
(target: under 60 s on 2 cores), with planted near duplicates and controls.

Questions are 30-60 words from a 20,000-word vocabulary (letters only, Zipf-like) with three numbers each.
1 % of them are planted copies of another question with one edit (a word replaced, a word deleted, or case, spacing and
punctuation changed): each must be found (either of the two dropped for the other). Another 1 % are
controls: copies with one number changed, which must stay. Ids are shuffled, so the copies are as often
before their original as after. Wall and CPU time, the peak memory and the load average are printed: on a
machine shared with other work the CPU time is what the stage costs.

    python benchmarks/near_dedup.py [--problems 1000000] [--threshold 0.85]
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bonforge.config import NearDuplicatesConfig
from bonforge.stages.decontaminate import decontaminate


def synthetic(n: int, seed: int = 0) -> tuple[pa.Table, list[tuple[int, int]], list[tuple[int, int]]]:
    """(problems, planted (copy, original) rows, control (copy, original) rows)."""
    rng = np.random.default_rng(seed)
    vocab = np.array(["w" + "".join(chr(97 + int(d)) for d in str(i)) for i in range(20_000)]
                     + [str(i) for i in range(1, 1000)])  # fmt: skip
    weights = 1 / np.arange(1, 20_001)
    n_planted = n_control = n // 100
    n_base = n - n_planted - n_control
    lengths = rng.integers(30, 61, size=n_base)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    flat = rng.choice(20_000, size=int(lengths.sum()), p=weights / weights.sum())
    for _ in range(3):  # three numbers per question, at random places
        flat[starts + rng.integers(0, lengths)] = 20_000 + rng.integers(0, 999, size=n_base)
    docs = [flat[s : s + n] for s, n in zip(starts, lengths)]
    planted, control = [], []
    for kind, pairs in (("planted", planted), ("control", control)):
        for i, orig in enumerate(rng.choice(n_base, size=n_planted, replace=False)):
            doc = docs[orig].copy()
            nums = np.flatnonzero(doc >= 20_000)
            if kind == "control":
                doc[nums[0]] = 20_000 + (doc[nums[0]] - 20_000 + 1 + rng.integers(0, 998)) % 999
            elif i % 3 == 0:
                doc[rng.choice(np.flatnonzero(doc < 20_000))] = rng.integers(0, 20_000)
            elif i % 3 == 1:
                doc = np.delete(doc, rng.choice(np.flatnonzero(doc < 20_000)))
            pairs.append((len(docs), int(orig)))
            docs.append(doc)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int32)
    words = pa.ListArray.from_arrays(pa.array(offsets), pa.array(vocab).take(pa.array(np.concatenate(docs))))
    text = pc.binary_join(words, " ")
    shout = np.zeros(len(docs), bool)
    shout[[c for c, _ in planted[2::3]]] = True  # the third kind: case, spacing and punctuation
    loud = pc.utf8_upper(pc.replace_substring(text, " ", ",  "))
    text = pc.if_else(pa.array(shout), loud, text)
    ids = rng.permutation(len(docs))
    table = pa.table({"problem_id": pa.array([f"p{i:07d}" for i in ids]), "question": pc.binary_join_element_wise(
        text, pa.scalar("?"), "")})
    return table, planted, control


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=1_000_000)
    ap.add_argument("--threshold", type=float, default=0.85)
    args = ap.parse_args()
    table, planted, control = synthetic(args.problems)
    load, before = os.getloadavg()[0], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    wall, cpu = time.perf_counter(), time.process_time()
    out = decontaminate(table, {}, dedup=False, near=NearDuplicatesConfig(threshold=args.threshold))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    ids = table.column("problem_id").to_pylist()
    dropped = dict(zip(out.column("problem_id").to_pylist(), out.column("matched_id").to_pylist()))
    pair = {frozenset((ids[a], ids[b])) for a, b in planted}
    found = sum(dropped.get(ids[a]) == ids[b] or dropped.get(ids[b]) == ids[a] for a, b in planted)
    false = sum(frozenset((p, m)) not in pair for p, m in dropped.items())
    controls = sum(ids[a] in dropped and dropped[ids[a]] == ids[b] or dropped.get(ids[b]) == ids[a]
                   for a, b in control)  # fmt: skip
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"near_dedup: {len(ids):,} problems in {wall:.1f} s wall ({len(ids) / wall:,.0f} rows/s), {cpu:.1f} s CPU, "
          f"peak {peak:,.0f} MiB ({before:,.0f} before the stage), load average {load:.1f} at the start")
    print(f"planted found: {found}/{len(planted)}; false drops: {false}; controls merged: {controls}/{len(control)}")


if __name__ == "__main__":
    main()
