"""The adaptive request window against a rate-limited server, side by side with a fixed window, in one run.

The server (``tests/helpers/llm_server.LimitedServer``, real HTTP) takes 8 requests at once, each answered in
``--delay`` seconds, and answers 429 with ``Retry-After: 1`` past that; halfway through (by answers) it takes
16. Neither number is told to the client. The sampling stage draws PROBLEMS x 8 samples from it twice, in
fresh stores: with the adaptive window under ``max_concurrency: 64``, then with a fixed window of 32 (the
engine before the adaptive window: all of ``max_concurrency`` in flight). Each prints the share of the server's
capacity it used (answers served over what the server could serve from the first request to the last answer,
at its limit of each moment), the 429s it got and the rows it failed to get (a row refused past its retries).
A third run is told the server's limit of each moment (the best any window can do: on a loaded machine the
client's and the server's turnaround between two requests is capacity no window can use), and the adaptive
window's share is printed as a ratio of it. Target: the adaptive window >= 90 % of capacity with 0 failed
rows (on an idle machine; on a loaded one, about the told client's share).

    python benchmarks/adaptive_window.py [--problems 128] [--delay 0.2] [--retries 6]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))  # the test server

from llm_server import LimitedServer  # noqa: E402

from bonforge.llm.window import Window  # noqa: E402

N = 8


class FixedWindow(Window):
    """A window that never moves: ``size`` requests in flight whatever the server says, or (``told``) the
    server's own limit of each moment, as a client told it would keep (the best any window can do here)."""

    def __init__(self, size: int, told: LimitedServer | None = None):
        self.told = told  # read by ``allowed``, which Window.__init__ records
        super().__init__(size)
        self.size, self.history = float(size), [[time.time(), self.allowed]]

    @property
    def allowed(self) -> int:
        return self.told.limit if self.told else int(self.size)

    def done(self, ticket) -> None:
        self.in_flight -= 1


def run(mode: str, problems: int, delay: float, retries: int) -> dict:
    import pyarrow as pa

    from bonforge.engine import run_node
    from bonforge.llm.config import OpenAITeacher
    from bonforge.llm.openai import OpenAIEngine
    from bonforge.schema import PROBLEMS
    from bonforge.stage import Ref, RowsMissing
    from bonforge.stages import sample
    from bonforge.storage.store import StageStore

    table = pa.Table.from_pylist([{"problem_id": f"p{i:05d}", "source": "s", "domain": "math",
                                   "question": f"What is {i} + {i}?"} for i in range(problems)], schema=PROBLEMS)
    with tempfile.TemporaryDirectory() as tmp, LimitedServer(8, delay, "1", {problems * N // 2: 16}) as server:
        store = StageStore(tmp)
        store.write_shard("problems", "pk", 0, table)
        ref = Ref("problems", "pk", store.commit("problems", "pk", 1, version="1", config={}, upstream={}))
        teacher = OpenAITeacher(engine="openai", name="t", model="m", base_url=server.url, api_key_env=None, n=N,
                                max_tokens=64, max_retries=retries, max_concurrency=64 if mode == "adaptive" else 32)
        engine = OpenAIEngine(teacher)
        if mode != "adaptive":
            engine.window = FixedWindow(32, server if mode == "told" else None)
        failed, t0 = 0, time.perf_counter()
        try:
            run_node(store, sample.node(ref, teacher, engine))
        except RowsMissing as e:
            failed = e.missing
        wall = time.perf_counter() - t0
        return {"share": server.capacity_share(), "refused": server.refused, "failed": failed, "wall": wall,
                "answered": server.answered, "window": engine.window.summary()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=128, help="problems (x 8 samples)")
    ap.add_argument("--delay", type=float, default=0.2, help="seconds the server takes per answer")
    ap.add_argument("--retries", type=int, default=6, help="max_retries (the recipe default: 6)")
    args = ap.parse_args()
    print(f"{args.problems} problems x {N} samples; the server takes 8 at once, then 16 after "
          f"{args.problems * N // 2} answers; {args.delay} s per answer; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores")
    print(f"{'window':<22} {'capacity share':>14} {'429s':>6} {'failed rows':>11} {'wall s':>7}  window sizes")
    shares = {}
    for mode, label in (("adaptive", "adaptive (max 64)"), ("fixed", "fixed 32 (before)"),
                        ("told", "told the server's limit")):
        r = run(mode, args.problems, args.delay, args.retries)
        shares[mode] = r["share"]
        sizes = sorted({int(p[1]) for p in r["window"]["history"]})
        moves = f"{sizes[0]}..{sizes[-1]}, {len(r['window']['history'])} changes" if mode == "adaptive" else ""
        print(f"{label:<22} {r['share']:>13.1%} {r['refused']:>6} {r['failed']:>11} {r['wall']:>7.1f}  {moves}")
    print(f"adaptive / told: {shares['adaptive'] / shares['told']:.2f}x of the share a client told the limits gets "
          f"on this machine now")


if __name__ == "__main__":
    main()
