"""What judging each assert-style check in a process of its own costs, side by side with another checkout.

``PYTHONPATH=$PWD python benchmarks/check_isolation.py --against DIR [-n 25] [-c 8] [--rounds 3]`` plans ``n``
distinct HumanEval-like checks and replays each on ``c`` programs' answers (a problem's candidates, one after
another, as ``judging.code`` replays a chunk's), through one check container (``CheckHost`` with backend
``docker``), in turn with this tree's code and with the code under ``DIR`` (a checkout with the same
``check_host.CheckHost``, e.g. ``git archive main | tar -x -C DIR``), each in a fresh interpreter; it prints the median
milliseconds per plan and per replay of each, and their ratio. The container's start is not counted.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _common import side_by_side

PROBE = """
import json, time
from bonforge.sandbox import codec
from bonforge.sandbox.check_host import CheckHost
from bonforge.sandbox.config import CodeVerifyConfig
n, c = {n}, {c}
host = CheckHost(768, CodeVerifyConfig(build_image=False))
host.plan("", "assert f(0) == 1\\n", "f")  # the container started
checks = [f"def check(candidate):\\n    for x in range({{i}}, {{i}} + 5):\\n        assert candidate(x) == x + 1\\n"
          f"check(f)\\n" for i in range(n)]
t0 = time.perf_counter()
plans = [host.plan("", c, "f") for c in checks]
planned = time.perf_counter() - t0
t0 = time.perf_counter()
for p in plans:
    for k in range(c):  # answers that differ (no replay remembered), right for even k
        calls = ["v " + json.dumps(codec.encode_value(args[0] + 1 + k % 2 * (k + 1))) for args, _ in
                 ([[codec.decode_value(a) for a in call[0]], call[1]] for call in p["plan"])]
        got = host.replay(p["key"], None, calls, {{"status": "ok"}}, 2.0, False)["status"]
        assert got == ("passed" if k % 2 == 0 else "wrong_answer"), got
replayed = time.perf_counter() - t0
host.close()
print(json.dumps([1000 * planned / n, 1000 * replayed / (n * c)]))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", type=Path, required=True, help="another checkout of bonforge")
    parser.add_argument("-n", type=int, default=25, help="distinct checks")
    parser.add_argument("-c", type=int, default=8, help="programs replayed per check")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    med = side_by_side(PROBE.format(n=args.n, c=args.c), args.against, args.rounds)
    print(f"{args.n} distinct checks x {args.c} programs through one check container, median of {args.rounds} "
          "rounds")
    for label, (plan, replay) in med.items():
        print(f"{label:<10} plan {plan:6.2f} ms   replay {replay:6.2f} ms")
    (p, r), (p0, r0) = med["this tree"], med["against"]
    c = args.c
    print(f"this tree / against: plan {p / p0:.2f}x the time, replay {r / r0:.2f}x, a problem (plan + {c} replays) "
          f"{(p + c * r) / (p0 + c * r0):.2f}x: {p + c * r - p0 - c * r0:+.1f} ms")


if __name__ == "__main__":
    main()
