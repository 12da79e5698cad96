"""S3 request costs behind the cluster model of docs/operations.md, measured against a real S3 server on this
machine (SeaweedFS, as the tests start it: a lower bound for a store across a network).

Writes ``--parts`` verification shards of ``--rows`` verdicts each through ``StageStore.write_shard`` (one PUT
each), times the reads the commit makes of every part (a footer GET for its row count, then the whole part
for compaction) and the commit itself (``compact_rows`` = 100,000, as the verify stage): per-request
milliseconds, and what the commit costs per part.

With ``--verify N``: the requests the server answered (its own counts, by type) while the verdicts stage of N
problems x 16 candidates ran on it (``verify_memory.py``'s stubbed run: shards of 256 candidates, committed),
per shard; with ``--baseline DIR`` (another checkout) that code's run on a store of its own first.

    python benchmarks/s3_requests.py                 # 200 parts of 256 verdicts
    python benchmarks/s3_requests.py --parts 100 --rows 4096
    python benchmarks/s3_requests.py --verify 256 --baseline DIR
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _verdicts(shard: int, rows: int):
    import pyarrow as pa

    from bonforge.schema import VERDICTS, conform

    cid = [f"p{shard:06d}-{i // 4:04d}/t/{i % 4}" for i in range(rows)]
    return conform(pa.table({"candidate_id": cid, "problem_id": [c.split("/")[0] for c in cid],
                             "teacher": ["t"] * rows, "extracted": ["7"] * rows, "correct": [True] * rows,
                             "reward": [1.0] * rows, "status": ["correct"] * rows}), VERDICTS)


def _requests(server) -> Counter:
    """The S3 requests the server answered so far, by type (a HEAD counts as a GET)."""
    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    out: Counter = Counter()
    for labels, n in re.findall(r"^SeaweedFS_s3_request_total\{(.*)\} (\S+)$", text, re.M):
        out[re.search(r'type="(\w+)"', labels).group(1)] += int(float(n))
    return out


def verify_requests(problems: int, baseline: Path | None) -> None:
    from verify_memory import PER, make_store, run_child

    from s3 import SeaweedFS

    codes = ([("baseline", baseline.resolve())] if baseline else []) + [("this code", REPO)]
    with tempfile.TemporaryDirectory(prefix="bonforge-s3-") as tmp:
        server = SeaweedFS(Path(tmp), metrics=True)
        try:
            os.environ.update(server.env)
            print(f"verdicts of {problems * PER:,} candidates on SeaweedFS, judging stubbed "
                  f"(load average {os.getloadavg()[0]:.1f}): S3 requests while the stage ran")
            for name, code in codes:
                url = server.url()
                make_store(url, problems)
                before = _requests(server)
                out = run_child(code, url)
                asked = _requests(server) - before
                shards = -(-out["rows"] // 256)
                by_type = ", ".join(f"{t} {n / shards:.1f}" for t, n in sorted(asked.items()))
                print(f"  {name:<9} {sum(asked.values()):6,} requests for {shards} shards: "
                      f"{sum(asked.values()) / shards:.1f} per shard ({by_type}), {out['wall_s']:.1f} s", flush=True)
        finally:
            server.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", type=int, default=200)
    ap.add_argument("--rows", type=int, default=256, help="verdicts per part (the verify stage's shard_rows)")
    ap.add_argument("--verify", type=int, metavar="PROBLEMS", help="count the requests of a verdicts stage")
    ap.add_argument("--baseline", type=Path, help="with --verify: another checkout's run first")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "tests" / "helpers"))  # the tests' S3 server
    if args.verify:
        return verify_requests(args.verify, args.baseline)
    from s3 import SeaweedFS  # the tests' server

    with tempfile.TemporaryDirectory(prefix="bonforge-s3-") as tmp:
        server = SeaweedFS(Path(tmp))
        try:
            os.environ.update(server.env)
            from bonforge.storage.store import StageStore

            store = StageStore(server.url())
            tables = [_verdicts(i, args.rows) for i in range(args.parts)]
            t0 = time.perf_counter()
            for i, t in enumerate(tables):
                store.write_shard("verdicts", "k", i, t)
            put = (time.perf_counter() - t0) / args.parts
            paths = [store.shard_path("verdicts", "k", i) for i in range(args.parts)]
            t0 = time.perf_counter()
            for p in paths:
                store._num_rows(p)
            footer = (time.perf_counter() - t0) / args.parts
            t0 = time.perf_counter()
            for p in paths:
                store.read_file(p)
            whole = (time.perf_counter() - t0) / args.parts
            t0 = time.perf_counter()
            store.commit("verdicts", "k", args.parts, version="1", config={}, upstream={}, compact_rows=100_000)
            commit = time.perf_counter() - t0
        finally:
            server.stop()
    print(f"{args.parts} parts of {args.rows} verdicts on SeaweedFS (load average {os.getloadavg()[0]:.1f}): "
          f"PUT {1000 * put:.1f} ms, footer GET {1000 * footer:.1f} ms, whole-part GET {1000 * whole:.1f} ms per "
          f"part; commit with compaction {commit:.2f} s ({1000 * commit / args.parts:.1f} ms per part)")


if __name__ == "__main__":
    main()
