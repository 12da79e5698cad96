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
from crash_build import Forks
from llm_server import ScriptedServer
from procs import kill_group
from test_reuse import solver, write_problems, write_recipe

from bonforge.storage.store import StageStore

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
pytestmark = pytest.mark.slow
# builds that share rows (limit: problems; rounding: verdicts; temperature: samples), each with something new
LIMITS, ROUNDINGS, TEMPERATURES = (8, 10, 12), (4, 6), (0.6, 0.7)
Variant = tuple[int, int, float]


def env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE), str(REPO / "tests" / "helpers")])}


def args(variant: Variant) -> list[str]:
    limit, rounding, temperature = variant
    return ["--set", f"problems.limit={limit}", "--set", f"verify.math.float_rounding={rounding}",
            "--set", f"teachers.served.temperature={temperature}"]


def in_flight(root: Path) -> set[tuple[str, str]]:
    """The stage outputs a killed build left uncommitted (a shard plan, no manifest)."""
    return {(d.parent.name, d.name) for d in (root / "stages").glob("*/*") if (d / "plan.json").is_file()
            and not (d / "manifest.json").is_file()}


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


def pause(proc, seconds: float) -> None:
    """Sleep ``seconds``, or until ``proc`` ends if it ends sooner (a kill point past its end would land nowhere)."""
    deadline = time.perf_counter() + seconds
    while proc.poll() is None and time.perf_counter() < deadline:
        time.sleep(0.01)


def test_sigkill_at_random_points_never_leaves_a_partial_stage(tmp_path):
    rng = random.Random(int(os.environ.get("BONFORGE_CRASH_SEED", "7")))
    write_problems(tmp_path, "problems.jsonl", 12)
    # a shard of samples takes 0.3 s at least; each build is a child forked by one pre-imported server
    with ScriptedServer(solver, delay_s=0.3) as server, Forks(env(), tmp_path / "logs") as forks:
        write_recipe(tmp_path / "recipe.yaml", server.url)
        recipe, store = tmp_path / "recipe.yaml", tmp_path / "store"
        references: dict[Variant, str] = {}

        def build(store: Path, recipe: Path, variant: Variant) -> dict:
            return forks.run([str(store), str(recipe), *args(variant)])

        def reference(variant: Variant) -> str:
            if variant not in references:
                references[variant] = content(tmp_path, build(tmp_path / f"scratch-{len(references)}", recipe, variant))
            return references[variant]

        t0 = time.perf_counter()
        reference((12, 6, 0.6))
        spans = {"build": time.perf_counter() - t0, "gc": 3.0}
        kills, stages_hit, tries = 0, set(), 0
        while kills < 30 and tries < 120:  # under load a build may finish before its kill: more tries
            tries += 1
            variant = (rng.choice(LIMITS), rng.choice(ROUNDINGS), rng.choice(TEMPERATURES))
            # a gc killed while it removes; a build with a temperature of its own killed while it samples (the
            # shared variants' samples are all committed after a few builds: later kills could not land there)
            kind = "gc" if tries % 6 == 0 else "sample" if tries % 4 == 0 else "build"
            if kind == "sample":
                variant = (variant[0], variant[1], 0.8 + tries / 1000)
            argv = [str(store), "--gc", "0"] if kind == "gc" else [str(store), str(recipe), *args(variant)]
            before = in_flight(store)
            proc = forks.start(argv)
            if kind == "sample":  # a random point inside sampling: once its first shard plan is written
                while proc.poll() is None and not any(s == "candidates" for s, _ in in_flight(store) - before):
                    time.sleep(0.01)
                pause(proc, rng.uniform(0.0, 1.0))
            else:
                wait = rng.uniform(0.2, spans[kind])
                pause(proc, wait)
            if proc.poll() is None:
                kills += 1
            elif kind != "sample":
                spans[kind] = wait  # it finished first: the next kill comes earlier
            kill_group(proc)
            assert_consistent(store)
            stages_hit |= {stage for stage, _ in in_flight(store) - before}
            if tries % 5 == 0:  # a rerun completes and publishes what a build from scratch does
                assert content(store, build(store, recipe, variant)) == reference(variant)
                assert_consistent(store)
        for variant in [(12, 6, 0.6), (8, 4, 0.7)]:
            assert content(store, build(store, recipe, variant)) == reference(variant)
    assert kills >= 30, f"only {kills} of {tries} children were still running when killed"
    assert {"candidates", "verdicts"} <= stages_hit, stages_hit  # killed inside sampling and verification


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
