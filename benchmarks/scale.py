"""Scale: scoring, GenSelect assembly and export on a synthetic pool of N problems x 16 candidates (4 teachers x 4
samples) with precomputed verdicts, through the real stage code.

The problems, candidates and verdicts tables are written straight into a temporary store under the keys the build
computes, 25,000 problems at a time (verdicts in files of ~100,000 rows, as the verify stage compacts them);
candidate texts are 400 characters, or with ``--texts realistic`` chain-of-thought-like (median ~2 KB, 1 % of them
12-48 KB). Then a fresh process runs the build DAG against that store, so only problem_stats, genselect and the
export are computed. Printed per size: each stage's wall and CPU time (the process's user + system seconds, DuckDB's
and Arrow's threads included: on a shared machine the wall time mostly measures the wait for a core) and its own peak
RSS; the process's peak RSS (target <= 2 GB, flat in the size); the prompt bytes written per second of genselect and
export; a DuckDB pass-rate-by-teacher query through the catalog (target < 2 s); ``bonforge report`` of the run in a
process of its own, its time and peak RSS (target <= 30 s, bounded memory: its figures are DuckDB aggregates that
read no candidate text); with ``--lookup``, the row-reuse look-up of ``incremental.py`` over that many problems x 16
candidates (at most 100,000 problems: the issue's 1.6 M rows, target <= 2 s); then the time and peak-RSS ratios of
the largest to the smallest size. The stages run this checkout's code (``bonforge`` from the repository root).

With ``--baseline DIR`` (another checkout of bonforge, e.g. ``git worktree add DIR main``), the same
generated store is also run by that code, first (its stages and its report), and the times are printed side by
side with their ratios and whether both published the same dataset bytes.

    python benchmarks/scale.py                      # 10,000 and 100,000 problems
    python benchmarks/scale.py --sizes 100000 1000000
    python benchmarks/scale.py --sizes 100000 1000000 --streaming     # every stage at once, as a build runs them
    python benchmarks/scale.py --baseline ../bonforge-main
    python benchmarks/scale.py --sizes 100000 --texts realistic
    python benchmarks/scale.py --sizes 100000 1000000 --lookup
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEACHERS, SAMPLES, TEXT_CHARS = 4, 4, 400
REPO = Path(__file__).resolve().parents[1]


def recipe():
    from bonforge.config import Recipe

    # never read: the stages that would read it are committed; its stated sha256 keys it (the empty file's)
    src = {"path": "synthetic/pool.jsonl", "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}
    return Recipe.model_validate({
        "name": "scale",
        "problems": {"name": "syn", "source": src},
        "teachers": [{"name": f"t{i}", "engine": "pool", "source": src, "samples": "s"} for i in range(TEACHERS)],
        "export": {"name": "scale"},
    })


def problem_id(i: int) -> str:
    """The id of the i-th synthetic problem (what the viewer benchmark asks for)."""
    return f"syn/{i:07d}"


CHUNK = 25_000  # problems generated and written at a time (generation runs in bounded memory too)


def _lengths(rng, rows: int, texts: str):
    """Candidate text lengths: 400 characters, or a chain-of-thought-like spread (median ~2 KB, lognormal,
    and 1 % of candidates in a long tail of 12-48 KB: up to 12K tokens)."""
    import numpy as np

    if texts == "short":
        return np.full(rows, TEXT_CHARS)
    body = np.minimum(rng.lognormal(np.log(2000), 0.45, rows), 12_000)
    tail = rng.random(rows) < 0.01
    return np.where(tail, rng.integers(12_000, 48_000, rows), body).astype(np.int64)


class _VerdictFiles:
    """A teacher's verdicts, committed in files of ~100K rows of whole problems (as the verify stage compacts
    its shards)."""

    def __init__(self, store, key: str):
        self.store, self.key, self.parts, self.files, self.text_bytes = store, key, [], 0, 0

    def add(self, table) -> None:
        import pyarrow as pa

        self.parts.append(table)
        if sum(p.num_rows for p in self.parts) >= 100_000:
            self.store.write_shard("verdicts", self.key, self.files, pa.concat_tables(self.parts))
            self.files, self.parts = self.files + 1, []

    def commit(self, teacher: str) -> None:
        import pyarrow as pa

        if self.parts:
            self.parts, last = [], self.parts
            self.store.write_shard("verdicts", self.key, self.files, pa.concat_tables(last))
            self.files += 1
        self.store.commit("verdicts", self.key, self.files, version="1", config={}, upstream={},
                          extra={"teacher": teacher})


def _candidates(rng, t: int, teacher: str, chunks, pid_of, difficulty, texts: str, corpus, verdicts: _VerdictFiles):
    """A teacher's candidates, a chunk of problems at a time; their verdicts go to ``verdicts``."""
    import numpy as np
    import pyarrow as pa

    from bonforge.schema import CANDIDATES, VERDICTS, conform

    filler, prose = corpus
    for lo, hi in chunks:
        rows = (hi - lo) * SAMPLES
        pid = np.repeat(pid_of(lo, hi), SAMPLES)
        idx = np.tile(np.arange(SAMPLES, dtype=np.int32), hi - lo)
        cids = [f"{p}/{teacher}/{i}" for p, i in zip(pid, idx)]
        if texts == "short":
            text = [f"Candidate {c}. " + filler[(j * 7 + t) % 256][:TEXT_CHARS] for j, c in enumerate(cids, lo)]
        else:
            size, start = _lengths(rng, rows, texts), rng.integers(0, len(prose) - 48_000, rows)
            text = [f"Candidate {c}. " + prose[s:s + m] for c, s, m in zip(cids, start.tolist(), size.tolist())]
        verdicts.text_bytes += sum(map(len, text))
        correct = rng.random(rows) < np.repeat(difficulty[lo:hi], SAMPLES)
        wrong = rng.integers(0, 5, rows).astype(str)
        yield conform(pa.table({"candidate_id": cids, "problem_id": pid, "teacher": [teacher] * rows,
                                "sample_index": idx, "text": text}), CANDIDATES)
        verdicts.add(conform(pa.table({
            "candidate_id": cids, "problem_id": pid, "teacher": [teacher] * rows,
            "extracted": np.where(correct, "7", wrong).astype(object), "correct": correct,
            "reward": correct.astype(float), "status": np.where(correct, "correct", "wrong_answer").astype(object),
        }), VERDICTS))


def generate(store_root: str, n: int, texts: str = "short") -> int:
    """Commit problems, candidates and verdicts of ``n`` synthetic problems under the build's keys, CHUNK
    problems at a time; returns the bytes of candidate text."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bonforge.schema import PROBLEMS, conform
    from bonforge.stage import Ref
    from bonforge.storage.store import StageStore
    from bonforge.stages import load, load_pool, verify

    rng = np.random.default_rng(0)
    store, rec = StageStore(store_root), recipe()
    words = np.array(["add", "the", "apples", "so", "we", "get", "total", "=", "7", "12"])
    filler = [" ".join(rng.choice(words, 80)) for _ in range(256)]
    prose = " ".join(rng.choice(words, 20_000))  # ~70 KB to cut realistic texts from

    def written(stage: str, key: str, tables, extra=dict):
        """Write the tables of ``tables`` as one committed file (appended batch by batch); the manifest's
        ``extra()`` is taken once they are written."""
        path = store.shard_path(stage, key, 0)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(".generating")
        writer = None
        for t in tables:
            writer = writer or pq.ParquetWriter(tmp, t.schema, compression="zstd")
            writer.write_table(t)
        writer.close()
        tmp.rename(path)
        return store.commit(stage, key, 1, version="1", config={}, upstream={}, extra=extra())

    chunks = [(lo, min(n, lo + CHUNK)) for lo in range(0, n, CHUNK)]
    pid_of = lambda lo, hi: np.array([problem_id(i) for i in range(lo, hi)], dtype=object)  # noqa: E731

    def problems():
        for lo, hi in chunks:
            pids = pid_of(lo, hi)
            yield conform(pa.table({"problem_id": pids, "source": ["syn"] * len(pids), "domain": ["math"] * len(pids),
                                    "question": [f"Question {p}: " + filler[i % 256][:200]
                                                 for i, p in zip(range(lo, hi), pids)],
                                    "answer": ["A: 7"] * len(pids)}), PROBLEMS)

    key = load.node(rec, Path(".")).key
    pref = Ref("problems", key, written("problems", key, problems()))
    difficulty = rng.random(n)  # each problem's chance that a sample is correct
    text_bytes = 0
    for t, teacher in enumerate(rec.teachers):
        key = load_pool.node(Path("."), pref, teacher).key
        verdicts = _VerdictFiles(store, verify.node(rec, pref, Ref("candidates", key, {}), {"math"}).key)
        cands = _candidates(rng, t, teacher.name, chunks, pid_of, difficulty, texts, (filler, prose), verdicts)
        extra = lambda v=verdicts, t=teacher.name: {"teacher": t, "text_chars": v.text_bytes}  # noqa: E731
        cref = Ref("candidates", key, written("candidates", key, cands, extra))  # text_chars: as the stages record
        assert verify.node(rec, pref, cref, {"math"}).key == verdicts.key
        verdicts.commit(teacher.name)
        text_bytes += verdicts.text_bytes
    return text_bytes


def _reset_peak() -> None:
    """Reset the kernel's peak-RSS mark of this process to its current RSS (Linux)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _peak_mb() -> int:
    """This process's peak RSS since the last ``_reset_peak`` (MB)."""
    with open("/proc/self/status") as f:
        return round(next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024)


def direct_run(store, rec):
    """A run of each node in this process (no Prefect, no Ray): the stage code alone."""
    from bonforge.engine import Run, run_node

    class Direct(Run):
        quiet = True

        cpu: dict[str, float] = {}

        rss: dict[str, int] = {}

        def __call__(self, node):
            t0, c0 = time.perf_counter(), time.process_time()
            _reset_peak()
            manifest = run_node(self.store, node)
            self.cpu[node.label] = round(time.process_time() - c0, 2)
            self.rss[node.label] = _peak_mb()
            _reset_peak()  # what runs between nodes (the export, after the last) is measured on its own
            return self._note(node, manifest, manifest["cached"], time.perf_counter() - t0)

    return Direct(store, rec)


def streaming_run(store, rec):
    """Every node started at once, each in this process on a thread of its own, as soon as what it reads exists
    (``engine.streaming``): one peak for the whole build (the stages overlap: no stage's own)."""
    from bonforge.engine.run import StreamingRun

    class Direct(StreamingRun):
        quiet = True

        cpu: dict[str, float] = {}

        rss: dict[str, int] = {}

    return Direct(store, rec)


def stages(store_root: str, streaming: bool = False) -> dict:
    """Run the DAG on the prepared store (``streaming``: every stage started at once); returns timings, peak RSS
    and the catalog query time."""
    import resource

    from bonforge.flows.build import dag
    from bonforge.storage.catalog import connect
    from bonforge.storage.run_record import RunRecord
    from bonforge.storage.store import StageStore

    store, rec = StageStore(store_root), recipe()
    run = (streaming_run if streaming else direct_run)(store, rec)
    t0, c0 = time.perf_counter(), time.process_time()
    dataset = dag(rec, run, Path("."))
    run.join()
    run.rss["export"] = _peak_mb()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    build_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # before the catalog queries below
    store.record_run(RunRecord.from_json({"run_id": "scale", "recipe_name": "scale", "status": "succeeded",
                                          "stages": run.record, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ")}))
    t1 = time.perf_counter()
    con = connect(store)
    t2 = time.perf_counter()
    by_teacher = con.sql("SELECT teacher, avg(correct::INT) AS pass_rate, count(*) AS n FROM verdicts "
                         "GROUP BY teacher ORDER BY teacher").fetchall()
    t3 = time.perf_counter()
    prompt_bytes = con.sql("SELECT sum(strlen(prompt)) FROM genselect").fetchall()[0][0] or 0
    if not streaming:  # what ran after the last node; a streaming build's nodes overlap: their times do not add
        run.timings["export"] = round(wall - sum(run.timings.values()), 2)
        run.cpu["export"] = round(cpu - sum(run.cpu.values()), 2)
    return {"wall_s": round(wall, 2), "timings": {k: v for k, v in run.timings.items() if v >= 0.05},
            "cpu_s": round(cpu, 2), "cpu": {k: v for k, v in run.cpu.items() if run.timings.get(k, 0) >= 0.05},
            # the stages' marks count too: resetting the mark (per stage) resets ru_maxrss as well
            "peak_rss_mb": max([round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), *run.rss.values()]),
            "build_rss_mb": max([round(build_rss / 1024), *run.rss.values()]),
            "stage_rss_mb": {k: run.rss[k] for k in run.timings if run.timings[k] >= 0.05 and k in run.rss},
            "catalog_connect_s": round(t2 - t1, 3), "query_s": round(t3 - t2, 3), "by_teacher": by_teacher,
            "prompts": dataset["files"]["verl/train.parquet"]["rows"], "prompt_bytes": prompt_bytes,
            "content": dataset["content_sha256"]}


def report(store_root: str) -> dict:
    """Time ``bonforge report`` of the run that ``stages`` recorded (a fresh process: its own peak RSS)."""
    import resource

    from bonforge.report import write_report
    from bonforge.storage.store import StageStore

    t0 = time.perf_counter()
    write_report(StageStore(store_root), "scale")
    return {"report_s": round(time.perf_counter() - t0, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def _child(*args: str, code: Path = REPO, script: str = __file__) -> str:
    """Run this script (or another ``script``) in a fresh process with the bonforge of the checkout ``code``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, script, *args], check=True, stdout=subprocess.PIPE, text=True, env=env)
    return out.stdout.strip()


def prompt_rate(r: dict) -> float:
    """Prompt bytes written per second of genselect and export (MB/s)."""
    secs = sum(v for k, v in r["timings"].items() if k in ("genselect", "export"))
    return r["prompt_bytes"] / 1e6 / max(secs, 1e-9)


def _line(label: str, r: dict) -> str:
    peak = r.get("stage_rss_mb", {})
    stages = ", ".join(f"{k} {v}s (cpu {r['cpu'].get(k, '?')}s, peak {peak.get(k, '?')} MB)"
                       for k, v in r["timings"].items())
    return (f"         {label}: stages {r['wall_s']:.1f}s, cpu {r['cpu_s']:.1f}s ({stages}); "
            f"peak RSS {r['peak_rss_mb']} MB (target <= 2048; {r.get('build_rss_mb', '?')} MB before the catalog "
            f"queries); {r['prompts']} prompts, "
            f"{r['prompt_bytes'] / 1e6:.0f} MB of prompt text, {prompt_rate(r):.1f} MB/s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--baseline", type=Path, help="another checkout of bonforge to run first on the same data")
    ap.add_argument("--texts", choices=["short", "realistic"], default="short",
                    help="candidate texts of 400 characters, or a chain-of-thought-like spread of lengths")
    ap.add_argument("--lookup", action="store_true",
                    help="also time the row-reuse look-up (benchmarks/incremental.py) for each size, up to 1.6 M rows")
    ap.add_argument("--streaming", action="store_true",
                    help="start every stage at once (engine.streaming), as a build does by default: one peak")
    args = ap.parse_args()
    results = {}
    for n in args.sizes:
        with tempfile.TemporaryDirectory(prefix="bonforge-scale-") as root:
            t0 = time.perf_counter()
            text_bytes = int(_child("generate", root, str(n), args.texts))
            gen = time.perf_counter() - t0
            base = None
            if args.baseline:
                copy = os.path.join(root, "baseline")
                shutil.copytree(os.path.join(root, "stages"), os.path.join(copy, "stages"))
                base = json.loads(_child("stages", copy, code=args.baseline.resolve()))
                base["report"] = json.loads(_child("report", copy, code=args.baseline.resolve()))
                shutil.rmtree(copy)
            load = os.getloadavg()[0]
            r = json.loads(_child("stages", root, *(["streaming"] if args.streaming else [])))
            rep = json.loads(_child("report", root))
        results[n] = r
        print(f"{n:>7} problems x {TEACHERS * SAMPLES} candidates ({args.texts} texts, "
              f"{text_bytes / 1e9:.2f} GB): generated in {gen:.0f}s; "
              f"load average {load:.1f} on {os.cpu_count()} cores")
        if base:
            print(_line("baseline", base))
        print(_line("this code", r))
        if base:
            ratios = ", ".join(f"{k} {base['timings'][k] / v:.1f}x" for k, v in r["timings"].items()
                               if k in base["timings"])
            print(f"         speed-up: stages {base['wall_s'] / r['wall_s']:.1f}x wall, "
                  f"{base['cpu_s'] / r['cpu_s']:.1f}x cpu"
                  f" ({ratios}); same dataset content: {base['content'] == r['content']}")
        print(f"         pass rate by teacher (DuckDB via the catalog): {r['query_s']:.3f}s "
              f"(target < 2 s; opening the catalog {r['catalog_connect_s']:.3f}s): "
              + ", ".join(f"{t} {p:.3f}" for t, p, _ in r["by_teacher"]))
        print(f"         bonforge report: {rep['report_s']:.1f}s (target <= 30 s), peak RSS {rep['peak_rss_mb']} MB"
              + (f"; baseline {base['report']['report_s']:.1f}s, peak RSS {base['report']['peak_rss_mb']} MB "
                 f"({base['report']['report_s'] / rep['report_s']:.1f}x)" if base else ""))
        if args.lookup:
            lines = _child(f"lookup:{min(n, 100_000)}", script=str(REPO / "benchmarks" / "incremental.py"))
            print("\n".join(f"         {line.strip()}" for line in lines.splitlines()))
    small, large = min(results), max(results)
    if small != large:
        ratio = results[large]["wall_s"] / results[small]["wall_s"]
        rss = results[large]["peak_rss_mb"] / results[small]["peak_rss_mb"]
        print(f"time ratio {large}/{small}: {ratio:.2f} for a size ratio of {large / small:.0f} (linear: equal); "
              f"peak RSS ratio {rss:.2f} (flat: 1, target <= 1.5)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "generate":
        print(generate(sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "short"))
    elif len(sys.argv) > 1 and sys.argv[1] == "stages":
        print(json.dumps(stages(sys.argv[2], streaming=sys.argv[3:] == ["streaming"])))
    elif len(sys.argv) > 1 and sys.argv[1] == "report":
        print(json.dumps(report(sys.argv[2])))
    else:
        main()
