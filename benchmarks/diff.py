"""`bonforge diff` at scale: two runs whose verdicts stages hold the same N candidates (16 a problem, one
teacher, files of 100,000 rows as a committed verdicts output has them), judged twice with ``--flip`` of the
labels changed, plus each run's problem_stats; the time of the whole comparison (``bonforge.report.diff``:
the join, the confusion table, kappa, the flips and the per-problem changes), the median of ``--rounds``
after a first, cold one, with the process's CPU time beside it (on a shared machine the wall time is mostly
the wait for a core). Target (issue 46): 1M candidates judged twice in <= 2 s. Then the count a build's commit
makes of the same change (``bonforge.engine.rejudge``: every verdict of the second run judged again under a
moved judge, against the first as the stored output): its time, and its flips, which equal the diff's.

    python benchmarks/diff.py                    # 1,000,000 candidates
    python benchmarks/diff.py --candidates 1000 --rounds 1   # a smoke run
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
import os
import statistics
import tempfile
import time

import duckdb
import numpy as np
import pyarrow as pa

from bonforge.manifest import Manifest
from bonforge.report.diff import diff, resolve
from bonforge.schema import PROBLEM_STATS, VERDICTS
from bonforge.storage.run_record import RunRecord
from bonforge.storage.store import StageStore

TARGET_S = 2.0


@dataclass(frozen=True)
class Node:  # what the re-judge count reads of a node
    stage: object
    key: str
FILE_ROWS = 100_000
PER_PROBLEM = 16


def verdicts(n: int, flip: float, seed: int) -> duckdb.DuckDBPyRelation:
    """N verdicts; with ``seed`` > 0, a share ``flip`` of them (chosen by a hash) with the other label."""
    moved = f"hash(i, {seed}) % 10000 < {int(flip * 10000)}" if seed else "false"
    return duckdb.sql(
        f"SELECT 'p' || lpad((i // {PER_PROBLEM})::VARCHAR, 8, '0') AS problem_id, "
        f"'p' || lpad((i // {PER_PROBLEM})::VARCHAR, 8, '0') || '/t1/' || (i % {PER_PROBLEM}) AS candidate_id, "
        "'t1' AS teacher, (i % 7)::VARCHAR AS extracted, "
        f"(hash(i) % 3 = 0) <> ({moved}) AS correct FROM range({n}) t(i)").select(
        "candidate_id, problem_id, teacher, extracted, correct, correct::DOUBLE AS reward, "
        "CASE WHEN correct THEN 'passed' ELSE 'wrong_answer' END AS status, NULL::INTEGER AS tests_passed, "
        "NULL::INTEGER AS tests_total, NULL AS detail, 1.0 AS latency_ms")


def stats(v: pa.Table) -> pa.Table:
    """problem_stats of the verdicts ``v``: a row per problem for teacher t1 and one for all teachers (``*``);
    kept where 0 < pass rate <= 0.5."""
    rows = duckdb.sql(
        "SELECT problem_id, t.teacher, count(*)::INTEGER AS n, count(*) FILTER (WHERE correct)::INTEGER AS n_correct, "
        "avg(correct::INTEGER) AS pass_rate, avg(reward) AS mean_reward, false AS stopped_early "
        "FROM v, (VALUES ('t1'), ('*')) t(teacher) GROUP BY ALL").select(
        "*, pass_rate > 0 AND pass_rate <= 0.5 AS keep, "
        "CASE WHEN pass_rate > 0 AND pass_rate <= 0.5 THEN NULL ELSE 'pass_rate_out_of_range' END AS drop_reason"
    ).to_arrow_table()
    return pa.table({f.name: rows.column(f.name).cast(f.type) if f.name in rows.column_names
                     else pa.nulls(rows.num_rows, f.type) for f in PROBLEM_STATS}, schema=PROBLEM_STATS)


def write(store: StageStore, stage: str, key: str, table: pa.Table) -> None:
    shards = range(0, max(table.num_rows, 1), FILE_ROWS)
    for i, start in enumerate(shards):
        store.write_shard(stage, key, i, table.slice(start, FILE_ROWS))
    store.commit(stage, key, len(shards), version="bench", config={}, upstream={}, extra={"teacher": "t1"})


def build(root: str, n: int, flip: float) -> None:
    store = StageStore(root)
    for run, seed in (("before", 0), ("after", 1)):
        v = verdicts(n, flip, seed).to_arrow_table().cast(VERDICTS)
        write(store, "verdicts", f"v-{run}", v)
        write(store, "problem_stats", f"s-{run}", stats(v))
        store.record_run(RunRecord.from_json({"run_id": run, "recipe_name": "bench", "status": "succeeded",
                                              "started": f"2026-01-01T00:00:0{seed}Z",
                                              "stages": {"verdicts": [f"v-{run}"], "problem_stats": [f"s-{run}"]}}))


def _ids(n: int, seed: int) -> pa.Array:
    """N random 33-byte identities (a verdict's width)."""
    data = pa.py_buffer(np.random.default_rng(seed).bytes(33 * n))
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(33), n, [None, data]).cast(pa.binary())


def rejudge_count(root: str) -> tuple[float, float, dict]:
    """The commit's count of re-judges (``bonforge.engine.rejudge.count``): every verdict of "after" computed
    again under a moved judge, against "before" as the stored output (its row index with the base ids)."""
    from bonforge.engine import rejudge
    from bonforge.stages.verify import MATH

    store = StageStore(root)
    keys = store.read("verdicts", "v-before", ["candidate_id"]).column("candidate_id")
    base = _ids(len(keys), 0)  # the same content on both sides, in the same candidate order
    store.loc.write_parquet(pa.table({"row_id": _ids(len(keys), 1), "row_key": keys, "base_id": base}),
                            store.loc.path("stages", "verdicts", "v-before", "rows.parquet"))
    stored = Manifest.from_json({**store.manifest("verdicts", "v-before").json(), "row_index": "rows.parquet"})
    after = store.read("verdicts", "v-after", ["candidate_id", "status", "correct"])
    computed = pa.table({"row_id": _ids(len(keys), 2), "row_key": after.column("candidate_id"), "base_id": base,
                         "status": after.column("status"), "correct": after.column("correct")})
    node = Node(MATH, "v-after")
    t0, c0 = time.perf_counter(), time.process_time()
    out = rejudge.count(store, node, [computed], lambda *_: [("v-before", stored)])
    return time.perf_counter() - t0, time.process_time() - c0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=1_000_000)
    ap.add_argument("--flip", type=float, default=0.02, help="share of the verdicts that flip")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        build(tmp, args.candidates, args.flip)
        print(f"store: 2 runs x {args.candidates:,} verdicts written in {time.perf_counter() - t0:.1f} s")
        store = StageStore(tmp)
        times, cpu, result = [], [], {}
        for _ in range(args.rounds + 1):
            t0, c0 = time.perf_counter(), time.process_time()
            result = diff(store, resolve(store, "before"), resolve(store, "after"))
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        warm = statistics.median(times[1:]) if args.rounds else times[0]
        p = result["problems"]
        print(f"diff of {args.candidates:,} candidates judged twice: cold {times[0]:.2f} s, median of "
              f"{args.rounds} {warm:.2f} s (CPU {statistics.median(cpu[1:] or cpu):.2f} s on {os.cpu_count()} cores, "
              f"load {os.getloadavg()[0]:.1f}); target {TARGET_S:.1f} s: {warm / TARGET_S:.2f}x of it")
        print(f"  flipped {result['flipped']:,} ({result['flipped'] / result['matched']:.2%}), kappa "
              f"{result['agreement']['correct']['kappa']:.4f}; problems: pass rate changed in "
              f"{p['pass_rate_changed']:,} of {p['compared']:,}, {p['kept_to_dropped']:,} now dropped, "
              f"{p['dropped_to_kept']:,} now kept")
        secs, cpu_s, counted = rejudge_count(tmp)
        print(f"re-judge count at commit ({args.candidates:,} verdicts judged again, one stored output): "
              f"{secs:.2f} s (CPU {cpu_s:.2f} s); re-judged {counted['rows_rejudged']:,}, "
              f"flipped {counted['rows_flipped']:,}")


if __name__ == "__main__":
    main()
