"""Host-side scans of a response (program extraction, the GenSelect judgment, a limit string) on the
shapes a degenerate policy writes: the patterns they replaced side by side with today's scans.

    python benchmarks/reward_scans.py [--chars 20000] [--big 1000000]

Prints, per shape, the old pattern's time and today's at ``--chars`` characters and their ratio, then
today's time at ``--big`` characters (the old patterns are quadratic: at 1 MB they take hours).
"""

from __future__ import annotations

import argparse
import re
import time

from bonforge.errors import DataError
from bonforge.judging.extract import extract_program
from bonforge.judging.judgment import parse_judgment
from bonforge.sources.spec_formats import Where, time_limit_s

# The patterns as they were (main 513b13a), kept here only to measure against
OLD_OPEN = re.compile(r"^[ \t]*```[ \t]*(python3?|py)?[ \t]*\n", re.M | re.I)
OLD_JUDGMENT = re.compile(r"Judgment:\s*\**\s*(-?\d+)")
OLD_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|secs?|seconds?)?\s*$", re.I)


def best_of(fn, text: str, runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(text)
        best = min(best, time.perf_counter() - t0)
    return best


def new_time_limit(text: str) -> None:
    try:
        time_limit_s(text, Where("t", "r"), "time_limit")
    except DataError:
        pass


SHAPES = {
    "fence then spaces (extraction)": (lambda n: "```" + " " * n, lambda t: OLD_OPEN.search(t),
                                       lambda t: extract_program(t, None, "stdio")),
    "judgment then spaces (genselect)": (lambda n: "Judgment:" + " " * n, lambda t: OLD_JUDGMENT.findall(t),
                                         lambda t: parse_judgment(t, 4)),
    "limit string with spaces (load)": (lambda n: "1" + " " * n + "x", lambda t: OLD_TIME.match(t), new_time_limit),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chars", type=int, default=20_000)
    ap.add_argument("--big", type=int, default=1_000_000)
    args = ap.parse_args()
    print(f"{'shape':36s} {'old @' + str(args.chars):>12s} {'new':>10s} {'ratio':>8s} {'new @' + str(args.big):>12s}")
    for name, (make, old, new) in SHAPES.items():
        text = make(args.chars)
        t_old, t_new = best_of(old, text, 1), best_of(new, text)
        t_big = best_of(new, make(args.big))
        print(f"{name:36s} {t_old:11.3f}s {t_new:9.4f}s {t_old / max(t_new, 1e-6):7.0f}x {t_big:11.3f}s")


if __name__ == "__main__":
    main()
