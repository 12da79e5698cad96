"""Container start-up of the sandbox pool, side by side with another checkout of bonforge.

``PYTHONPATH=$PWD python benchmarks/sandbox_startup.py --against DIR [-n 8] [--rounds 3]`` starts a pool of
``n`` containers (``SandboxPool.start``: every worker started in parallel and ready) and closes it, in
turn with this tree's code and with the code under ``DIR`` (e.g. ``git archive moves | tar -x -C DIR``),
each in a fresh interpreter, and prints the median seconds of each and their ratio. The two trees' images
must exist (``python -m bonforge.sandbox build-image`` in each).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _common import side_by_side

PROBE = """
import json, time
from bonforge.sandbox import image
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.pool import SandboxPool
t0 = time.perf_counter()
if hasattr(image, "client"):  # the Docker SDK: loaded and connected once per process
    image.client().version()
client = time.perf_counter() - t0
pool = SandboxPool(CodeVerifyConfig(pool_size={n}, build_image=False))
t0 = time.perf_counter()
pool.start()
started = time.perf_counter() - t0
t0 = time.perf_counter()
pool.close()
print(json.dumps([started, time.perf_counter() - t0, client]))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", type=Path, required=True, help="another checkout of bonforge")
    parser.add_argument("-n", type=int, default=8, help="containers per pool")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    med = side_by_side(PROBE.format(n=args.n), args.against, args.rounds)
    print(f"pool of {args.n} containers, median of {args.rounds} rounds (start = every runner ready; client = "
          "loading and connecting the Docker SDK, once per process, where the tree uses it)")  # fmt: skip
    for label, (start, close, client) in med.items():
        print(f"{label:<10} start {start:6.2f} s   close {close:6.2f} s   client {client:5.2f} s")
    (s, c, k), (s0, c0, k0) = med["this tree"], med["against"]
    print(f"this tree / against: start {s / s0:.2f}x the time, with the client {(s + k) / (s0 + k0):.2f}x; "
          f"close {c / c0:.2f}x")


if __name__ == "__main__":
    main()
