"""Viewer: server time of `bonforge view`'s JSON endpoints on the store of ``scale.py`` (N problems x 16
candidates, problem_stats and genselect computed by the real stages), and the size of the page's assets.

Each request goes through the real Starlette app (Starlette's test client, in this process); the time
reported is the app's own (its ``Server-Timing`` header: from the request to the JSON body, DuckDB
included), the median of ``--repeat`` requests after one warm-up, with the process's CPU time per request
beside it (on a shared machine the wall time is mostly the wait for a core). Opening the run's catalog, the
in-memory problem index and the sorted copies (``bonforge.viewer.catalog``) happen once and are reported
apart. Targets (issue 25): the first page of problems <= 100 ms, a filtered
and sorted page <= 200 ms, one problem with its 16 candidates <= 50 ms, a text search <= 500 ms, the page's
own assets <= 300 KB.

    python benchmarks/viewer.py                 # 100,000 problems
    python benchmarks/viewer.py --problems 10000
    python benchmarks/viewer.py --problems 8 --repeat 1   # a smoke run
    python benchmarks/viewer.py --store DIR     # a store built earlier (scale.py generate + stages)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402  (the store generator of the scale benchmark)

TARGETS_MS = {"first page": 100, "filtered + sorted page": 200, "one problem (16 candidates)": 50,
              "text search": 500}


def requests(n: int) -> dict[str, tuple[str, dict]]:
    middle = scale.problem_id(n // 2)
    return {
        "first page": ("/api/problems", {}),
        "filtered + sorted page": ("/api/problems", {"min": 0.25, "max": 0.75, "teacher": "t1", "kept": "kept",
                                                     "sort": "pass_rate", "desc": 1, "page": 3}),
        "one problem (16 candidates)": ("/api/problem", {"id": middle}),
        "text search": ("/api/problems", {"q": f"QUESTION {middle}:"}),
        "last page": ("/api/problems", {"page": max(0, -(-n // 50) - 1)}),  # 50 problems a page
        "status filter": ("/api/problems", {"status": "wrong_answer", "sort": "n_correct"}),
        "sql box (pass rate by teacher)": ("/api/sql", {"sql": "SELECT teacher, avg(correct::INT) FROM verdicts "
                                                               "GROUP BY teacher ORDER BY teacher"}),
    }


def measure(root: str, n: int, repeat: int) -> None:
    from starlette.testclient import TestClient

    from bonforge.storage.store import StageStore
    from bonforge.viewer.app import STATIC, create_app

    app = create_app(StageStore(root))
    client = TestClient(app, base_url="http://127.0.0.1", headers={"X-Bonforge-Key": app.state.key})  # the page's
    t0 = time.perf_counter()
    assert client.get("/api/run").status_code == 200
    t1 = time.perf_counter()
    assert client.get("/api/problems").status_code == 200
    t2 = time.perf_counter()
    one = timed(client, "/api/problem", {"id": scale.problem_id(n // 2)}, repeat)
    cat = app.state.catalog
    assert cat.wait_copies(cat.run(None), 600)
    t3 = time.perf_counter()
    print(f"  opening the run's catalog {1000 * (t1 - t0):.0f} ms; the problem index {1000 * (t2 - t1):.0f} ms; "
          f"sorted copies ready {t3 - t2:.1f} s later (one problem meanwhile: {one[0]:.1f} ms)")
    for label, (path, params) in requests(n).items():
        wall, cpu, rows, size = timed(client, path, params, repeat)
        target = TARGETS_MS.get(label)
        verdict = f"  target <= {target} ms: {'met' if wall <= target else 'MISSED'}" if target else ""
        print(f"  {label:32} {wall:6.1f} ms (cpu {cpu:6.1f} ms); {rows} rows, {size / 1024:.1f} KB{verdict}")
    assets = sum(f.stat().st_size for f in STATIC.iterdir())
    print(f"  the page's own assets: {assets / 1024:.1f} KB in {len(list(STATIC.iterdir()))} files "
          f"(target <= 300 KB: {'met' if assets <= 300 * 1024 else 'MISSED'})")


def timed(client, path: str, params: dict, repeat: int) -> tuple[float, float, int, int]:
    """Median server time (ms), median process CPU time per request (ms), rows and bytes of the answer."""
    walls, cpus = [], []
    for i in range(repeat + 1):
        c0 = time.process_time()
        res = client.post(path, json=params) if path == "/api/sql" else client.get(path, params=params)
        assert res.status_code == 200, (path, res.text)
        if i:  # the first is the warm-up
            walls.append(float(res.headers["server-timing"].split("dur=")[1]))
            cpus.append(1000 * (time.process_time() - c0))
    body = res.json()
    return statistics.median(walls), statistics.median(cpus), len(body.get("rows", body.get("candidates", []))), \
        len(res.content)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--store", help="a store scale.py built earlier with --problems N (default: build one)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bonforge-viewer-") as tmp:
        os.environ["BONFORGE_HOME"] = os.path.join(tmp, "home")  # the sorted copies go there
        root = args.store or os.path.join(tmp, "store")
        if not args.store:
            t0 = time.perf_counter()
            scale._child("generate", root, str(args.problems))
            scale._child("stages", root)
            print(f"store built in {time.perf_counter() - t0:.0f}s")
        print(f"{args.problems} problems x {scale.TEACHERS * scale.SAMPLES} candidates; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        measure(root, args.problems, args.repeat)


if __name__ == "__main__":
    main()
