"""Crash safety: `bonforge run` killed with SIGKILL (with everything it started) in the middle of a stage,
then run again, loses and duplicates no shard and publishes a dataset byte-identical to an uninterrupted
run's; a reader querying the catalog while a build writes sees only committed stages.

The builds use one Prefect server of the session (a configured one: it outlives a killed build) and run
through a small driver that makes shards smaller (more shards per stage) and each
assembly shard slower, so that a kill lands while a stage has some but not all of its shards. One
uninterrupted GSM8K build serves the module: the reference of the killed builds, and (copied) the store
that a second build writes to while a reader queries it. The builds that are never killed join the
session's warm Ray head (conftest's ``services``) instead of starting a local Ray each (tens of seconds on
a loaded 2-core machine), and so do the reruns that finish a killed build; the killed builds start their own
Ray, which the kill takes down with them (no task of theirs outlives them on a shared head).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import duckdb
import pytest

from llm_server import ScriptedServer, answer
from procs import kill_group, run, start

from bonforge.storage.catalog import connect
from bonforge.storage.fs import sha256_file
from bonforge.storage.store import StageStore

REPO = Path(__file__).resolve().parents[2]
GSM8K = REPO / "recipes" / "gsm8k-genselect.yaml"
pytestmark = pytest.mark.slow

DRIVER = """
import sys, time
from dataclasses import replace
from bonforge.stages import assemble, verify

verify.MATH = replace(verify.MATH, shard_rows=64)
_assemble = assemble.STAGE.compute


def slow_assemble(*args, **kwargs):
    time.sleep(0.4)
    return _assemble(*args, **kwargs)


assemble.STAGE = replace(assemble.STAGE, shard_rows=40, compute=slow_assemble)
from bonforge.cli import app

app(sys.argv[1:])
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("driver") / "slow_bonforge.py"
    path.write_text(DRIVER)
    return path


GSM8K_SETS = ("problems.limit=300",)


@pytest.fixture(scope="module")
def warm_ray(services, shared_prefect) -> dict[str, str]:
    """The environment of a build that is never killed: the session's Prefect server, the warm Ray head."""
    return {**os.environ, **{k: v for k, v in services.items() if k != "PREFECT_API_URL"}}


@pytest.fixture(scope="module")
def gsm8k_reference(driver, tmp_path_factory, warm_ray) -> Path:
    """The store of one uninterrupted GSM8K build (``GSM8K_SETS``); read only: copy it to write to it."""
    folder = tmp_path_factory.mktemp("gsm8k-reference")
    ref, log = folder / "store", folder / "ref.log"
    assert run(build(driver, GSM8K, ref, *GSM8K_SETS), warm_ray, log) == 0, log.read_text()[-3000:]
    return ref


def build(driver: Path, recipe: Path, store: Path, *overrides: str) -> list[str]:
    """The arguments of a `bonforge run` through the driver."""
    args = [str(driver), "run", str(recipe), "--store", str(store)]
    for o in overrides:
        args += ["--set", o]
    return args


def partial_stage(store: Path, stage: str) -> Path | None:
    """A directory of ``stage`` with some shards written and no manifest yet."""
    for d in (store / "stages" / stage).glob("*"):
        if not (d / "manifest.json").exists() and any(d.glob("part-*.parquet")):
            return d
    return None


def kill_mid_stage(args: list[str], store: Path, stage: str, log: Path, timeout: float = 300) -> Path:
    """Start the build, SIGKILL its process group as soon as ``stage`` is partly written; returns the
    partial stage directory."""
    proc = start(args, log=log)
    deadline = time.monotonic() + timeout
    try:
        while (d := partial_stage(store, stage)) is None:
            assert proc.poll() is None, (
                f"the build ended before {stage} was partly written:\n" + log.read_text()[-3000:]
            )
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.02)
    finally:
        kill_group(proc)
    return d


def dataset_files(store: Path) -> dict[str, str]:
    # the GenSelect dataset (a GSM8K recipe also publishes its RL dataset, named *-rl)
    (version,) = [v for v in (store / "datasets").glob("*/v*") if not v.parent.name.endswith("-rl")]
    return {str(p.relative_to(version)): sha256_file(p) for p in sorted(version.rglob("*.parquet"))}


def assert_consistent(store: Path) -> None:
    """Every committed stage's files hold exactly the rows its manifest records, each key once."""
    keys = {"problems": "problem_id", "candidates": "candidate_id", "verdicts": "candidate_id",
            "problem_stats": "problem_id, teacher", "genselect": "prompt_id", "maxk_weights": "candidate_id",
            "selector_eval": "prompt_id"}  # each stage's row key
    for man_path in (store / "stages").glob("*/*/manifest.json"):
        man = json.loads(man_path.read_text())
        assert all((man_path.parent / f).is_file() for f in man["files"]), man_path
        files = [str(man_path.parent / f) for f in man["files"]]
        rows, distinct = duckdb.sql(
            f"SELECT count(*), count(DISTINCT ({keys[man['stage']]})) FROM read_parquet({files!r})"
        ).fetchall()[0]
        assert rows == distinct == man["rows"], man_path


def test_kill_during_verification_and_assembly_then_rerun_is_byte_identical(driver, tmp_path, gsm8k_reference,
                                                                           warm_ray):
    overrides, ref, store = GSM8K_SETS, gsm8k_reference, tmp_path / "store"

    partial_verdicts = kill_mid_stage(
        build(driver, GSM8K, store, *overrides), store, "verdicts", tmp_path / "kill1.log"
    )
    assert not (store / "datasets").exists()
    partial_genselect = kill_mid_stage(
        build(driver, GSM8K, store, *overrides), store, "genselect", tmp_path / "kill2.log"
    )
    assert not (store / "datasets").exists()
    assert json.loads((partial_verdicts / "manifest.json").read_text())["shards_resumed"] >= 1
    final = tmp_path / "final.log"
    assert run(build(driver, GSM8K, store, *overrides), warm_ray, final) == 0, final.read_text()[-3000:]
    assert json.loads((partial_genselect / "manifest.json").read_text())["shards_resumed"] >= 1

    assert dataset_files(store) == dataset_files(ref)
    assert_consistent(store)


def test_reader_during_a_write_sees_only_committed_stages(driver, tmp_path, gsm8k_reference, warm_ray):
    store = tmp_path / "store"
    shutil.copytree(gsm8k_reference, store, symlinks=True)  # a first build's store (its "latest" links too)
    query = "SELECT (SELECT count(*) FROM problem_stats WHERE keep), (SELECT count(*) FROM genselect)"
    before = connect(StageStore(store)).sql(query).fetchall()[0]
    proc = start(build(driver, GSM8K, store, *GSM8K_SETS, "filter.max_pass_rate=0.75"), warm_ray,
                 tmp_path / "second.log")
    seen_partial, answers = False, set()
    try:
        while proc.poll() is None:
            seen_partial |= partial_stage(store, "genselect") is not None
            answers.add(connect(StageStore(store)).sql(query).fetchall()[0])
            time.sleep(0.05)
    finally:
        kill_group(proc)
    assert proc.returncode == 0, (tmp_path / "second.log").read_text()[-3000:]
    assert seen_partial  # the reader did run while genselect was half written
    after = connect(StageStore(store)).sql(query).fetchall()[0]
    assert after != before and answers <= {before, after}


def solver(n: int, body: dict):
    """Right for one seed in four (pass rate 0.25: kept by the default filter)."""
    a, b = map(int, re.search(r"What is (\d+) \+ (\d+)\?", body["messages"][0]["content"]).groups())
    reply = answer(body)
    value = a + b if body["seed"] % 4 == 0 else a + b + 1
    reply["choices"][0]["message"]["content"] = f"So the answer is \\boxed{{{value}}}."
    return 200, {}, reply


def test_kill_during_sampling_then_rerun_is_byte_identical(driver, tmp_path, shared_prefect, warm_ray):
    problems = tmp_path / "problems.jsonl"
    problems.write_text(
        "".join(json.dumps({"question": f"What is {i} + {2 * i}?", "answer": str(3 * i)}) + "\n" for i in range(1, 25))
    )
    with ScriptedServer(solver, delay_s=0.02) as server:
        recipe = tmp_path / "recipe.yaml"
        recipe.write_text(f"""
name: sampled
problems: {{name: toy, source: {{path: {problems}}}}}
teachers:
  - {{name: served, engine: openai, model: m, base_url: "{server.url}", api_key_env: null, n: 8,
     max_tokens: 64, shard_problems: 2, max_concurrency: 2}}
export: {{name: toy-genselect}}
""")
        ref, store = tmp_path / "ref", tmp_path / "store"
        assert run(build(driver, recipe, ref), warm_ray, tmp_path / "ref.log") == 0
        sent = server.count
        partial = kill_mid_stage(build(driver, recipe, store), store, "candidates", tmp_path / "kill.log")
        done, at_kill = len(list(partial.glob("part-*.parquet"))), server.count
        assert 1 <= done < 12 and at_kill > sent
        final = tmp_path / "final.log"
        assert run(build(driver, recipe, store), warm_ray, final) == 0, final.read_text()[-3000:]
        assert server.count - at_kill == (12 - done) * 2 * 8  # the rerun sampled only the missing shards
    man = json.loads((partial / "manifest.json").read_text())
    assert man["shards_resumed"] == done and man["rows"] == 24 * 8
    assert dataset_files(store) == dataset_files(ref)
    assert_consistent(store)
