"""Crash consistency of builds that reuse rows, tested like a database: builds (and gc) killed with SIGKILL at
random points; after each kill a reader sees only whole committed stages and dataset versions, and a rerun
publishes the same dataset content as a build from scratch. A full disk fails with one `error:` line and
commits nothing half-way."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from llm_server import ScriptedServer
from procs import kill_group, start
from test_reuse import solver, write_problems, write_recipe

from bonforge.storage.store import StageStore

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
pytestmark = pytest.mark.slow
VARIANTS = ("problems.limit=10", "problems.limit=12")  # two builds sharing most rows


def env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)])}


def build(store: Path, recipe: Path, variant: str) -> dict:
    out = subprocess.run([sys.executable, str(HERE / "crash_build.py"), str(store), str(recipe), "--set", variant],
                         env=env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def content(store: Path, record: dict) -> str:
    return json.loads((Path(record["dataset"]) / "manifest.json").read_text())["content_sha256"]


def assert_consistent(root: Path) -> int:
    """Every committed stage has all its files, whole, with the manifest's row counts (and a readable row
    index where it names one); every dataset version's files match their sha256. Returns the stages seen."""
    store, seen = StageStore(root), 0
    for stage_dir in sorted((root / "stages").glob("*/*")):
        stage, key = stage_dir.parent.name, stage_dir.name
        if not store.exists(stage, key):
            continue
        man = store.manifest(stage, key)
        rows = [pq.read_metadata(stage_dir / f).num_rows for f in man["files"]]
        assert rows == man["rows_per_file"], (stage, key)
        if man.get("row_index"):
            assert pq.read_table(stage_dir / man["row_index"]).num_rows <= man["rows"]
        seen += 1
    for man_path in (root / "datasets").glob("*/v*/manifest.json"):
        man = json.loads(man_path.read_text())
        for name, meta in man["files"].items():
            assert hashlib.sha256((man_path.parent / name).read_bytes()).hexdigest() == meta["sha256"], man_path
    return seen


def test_sigkill_at_random_points_never_leaves_a_partial_stage(tmp_path):
    rng = random.Random(int(os.environ.get("BONFORGE_CRASH_SEED", "7")))
    write_problems(tmp_path, "problems.jsonl", 12)
    with ScriptedServer(solver, delay_s=0.01) as server:
        write_recipe(tmp_path / "recipe.yaml", server.url)
        recipe = tmp_path / "recipe.yaml"
        t0 = time.perf_counter()
        reference = {v: content(tmp_path, build(tmp_path / f"scratch-{i}", recipe, v)) for i, v in enumerate(VARIANTS)}
        span = (time.perf_counter() - t0) / len(VARIANTS)  # one build from scratch, start-up included
        store, kills, reruns = tmp_path / "store", 0, 0
        for i in range(36):
            variant = rng.choice(VARIANTS)
            if i % 6 == 5:  # a gc killed while it removes
                args, when = [str(store), "--gc", "0"], rng.uniform(0.5, 3.0)
            else:
                args, when = [str(store), str(recipe), "--set", variant], rng.uniform(0.5, span)
            proc = start([str(HERE / "crash_build.py"), *args], env=env())
            time.sleep(when)
            if proc.poll() is None:
                kills += 1
            kill_group(proc)
            assert_consistent(store)
            if i % 4 == 3:
                reruns += 1
                assert content(store, build(store, recipe, variant)) == reference[variant]
                assert_consistent(store)
        for variant in VARIANTS:
            assert content(store, build(store, recipe, variant)) == reference[variant]
    assert kills >= 30, f"only {kills} of 36 children were still running when killed"


def _tmpfs(path: Path, size: str) -> None:
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")


def test_a_full_disk_fails_with_one_error_line_and_commits_nothing_half_way(tmp_path):
    """The store on a 1 MiB tmpfs: the problems fit, the samples (long texts) do not."""
    disk = tmp_path / "disk"
    _tmpfs(disk, "1m")
    try:
        write_problems(tmp_path, "problems.jsonl", 12)

        def long(n: int, body: dict):
            status, headers, reply = solver(n, body)
            reply["choices"][0]["message"]["content"] += " " + os.urandom(40_000).hex()
            return status, headers, reply

        with ScriptedServer(long) as server:
            write_recipe(tmp_path / "recipe.yaml", server.url)
            out = subprocess.run([sys.executable, "-m", "bonforge", "run", str(tmp_path / "recipe.yaml"),
                                  "--store", str(disk / "store")], env=env(), capture_output=True, text=True,
                                 timeout=600)
        assert out.returncode == 2, out.stderr[-3000:]
        errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "no space left" in errors[0], out.stderr[-3000:]
        assert "Traceback" not in out.stderr
        store = StageStore(disk / "store")
        assert not store.exists("candidates", next(iter(os.listdir(disk / "store" / "stages" / "candidates"))))
        assert assert_consistent(disk / "store") >= 1  # problems committed, nothing else
        leftovers = [p.name for p in (disk / "store").rglob(".*.tmp-*")]
        assert leftovers == []
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
