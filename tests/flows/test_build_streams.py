"""A streaming build (``engine.streaming: true``) against the barrier build of the same recipe: the same stage
keys (the pinned ones), the same dataset bytes; verification of a teacher's first samples starts before its
sampling ends, and the teachers sample side by side (read from the stages' recorded busy spans); a build
killed midway, then rerun, gives the same bytes and computes again none of the shards it had written."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from crash_build import LocalRun
from golden_keys import assert_golden
from llm_server import ScriptedServer, adder
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.config import load_recipe
from bonforge.engine.run import StreamingRun, execute
from bonforge.flows.build import dag
from bonforge.storage.run_record import RunRecord
from bonforge.storage.store import StageStore

REPO = Path(__file__).resolve().parents[2]
GSM8K = REPO / "recipes" / "gsm8k-genselect.yaml"
HELPERS = REPO / "tests" / "helpers"
pytestmark = pytest.mark.slow  # Ray for the verification of several shards


@pytest.fixture(scope="module")
def ray_session():
    import ray

    yield
    ray.shutdown()


def build(store: Path, recipe: Path, streaming: bool, *sets: str) -> dict:
    """A build of ``recipe`` in this process, without Prefect: node after node, or streaming."""
    r = load_recipe(str(recipe), [f"engine.streaming={str(streaming).lower()}", *sets])
    run = (StreamingRun if streaming else LocalRun)(StageStore(store), r)
    return execute(dag, run, str(recipe.parent), None, record_start=True).json()


def content(record: dict, dataset: str = "dataset") -> str:
    return json.loads((Path(record[dataset]) / "manifest.json").read_text())["content_sha256"]


def test_the_gsm8k_pool_recipe_streams_to_the_same_keys_and_bytes(tmp_path, gsm8k_pool, ray_session):
    barrier = build(tmp_path / "barrier", GSM8K, False)
    streaming = build(tmp_path / "streaming", GSM8K, True)
    assert_golden("gsm8k-genselect", barrier)
    assert_golden("gsm8k-genselect", streaming)
    assert content(streaming) == content(barrier)
    assert streaming["cached"] == {} and streaming["status"] == "succeeded"


def fusor(n: int, body: dict):
    """A fusor that copies the first response of its prompt, and a selector that picks candidate 0."""
    from llm_server import answer

    prompt, reply = body["messages"][0]["content"], answer(body)
    first = prompt.split("### Response 0\n", 1)[-1].split("\n\n### Response 1\n", 1)[0]
    reply["choices"][0]["message"]["content"] = "Judgment: 0" if "### Candidate 0" in prompt else first
    return 200, {}, reply


RECIPES = REPO / "recipes"
SELECTOR = "fusion.selector={{name: selector, engine: openai, model: s, base_url: '{url}', api_key_env: null}}"
GOLDEN_BUILDS = [  # the builds whose keys are pinned (the golden keys) and the test settings they are built with
    pytest.param("gsm8k-genselect-looser", "gsm8k-genselect.yaml", ["filter.max_pass_rate=0.75"], id="looser"),
    pytest.param("gsm8k-fusion", "gsm8k-fusion.yaml", ["problems.limit=30", "fusion.fusor.base_url={url}", SELECTOR],
                 id="fusion"),
    pytest.param("humaneval-genselect", "humaneval-genselect.yaml",
                 ["problems.limit=12", "problems.include_reference=true"], id="humaneval", marks=pytest.mark.docker),
    pytest.param("apps-genselect", "apps-genselect.yaml", [], id="apps", marks=pytest.mark.docker),
]


@pytest.mark.parametrize("golden, recipe, sets", GOLDEN_BUILDS)
def test_every_pinned_build_streams_to_its_keys_and_the_barrier_builds_bytes(tmp_path, request, gsm8k_pool,
                                                                              ray_session, golden, recipe, sets):
    """Streaming is the default: each build the golden keys pin (the code ones in the sandbox, FusioN with its
    fusor served), built streaming and node after node, gives the pinned keys and the same bytes of every
    dataset it publishes. (``sampled`` is gsm8k-genselect's shape served, covered by the sampled tests below; the
    maxk and selector evaluations are commands that read a build.)"""
    if "docker" in request.node.keywords:
        request.getfixturevalue("sandbox_image")
        request.getfixturevalue("data_dir")
    with ScriptedServer(fusor) as server:
        sets = [s.format(url=server.url) for s in sets]
        barrier = build(tmp_path / "barrier", RECIPES / recipe, False, *sets)
        streaming = build(tmp_path / "streaming", RECIPES / recipe, True, *sets)
    assert_golden(golden, barrier)
    assert_golden(golden, streaming)
    for dataset in ("dataset", "fusion_dataset", "rl_dataset", "preference_dataset"):
        assert (barrier.get(dataset) is None) == (streaming.get(dataset) is None)
        if barrier.get(dataset):
            assert content(streaming, dataset) == content(barrier, dataset), dataset


N, PROBLEMS = 8, 40


def sampled_recipe(tmp_path: Path, url: str) -> Path:
    (tmp_path / "problems.jsonl").write_text("".join(
        json.dumps({"question": f"What is {i} + {2 * i}?", "answer": str(3 * i)}) + "\n" for i in range(PROBLEMS)))
    teachers = "".join(f"""
  - {{name: {name}, engine: openai, model: m, base_url: "{url}", api_key_env: null, n: {N}, seed: {seed},
     max_tokens: 64, shard_problems: 8, max_concurrency: 4, max_retries: 0}}""" for name, seed in (("a", 0), ("b", 1)))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"""
name: sampled-two
problems: {{name: toy, source: {{path: problems.jsonl}}}}
teachers:{teachers}
export: {{name: toy-genselect}}
""")
    return recipe


@pytest.fixture
def small_verify_shards(monkeypatch):
    """Verification shards of 32 candidates, in process (shard sizes are not in the key): several per
    sampling shard, without Ray."""
    from bonforge.stages import verify

    monkeypatch.setattr(verify, "MATH", dataclasses.replace(verify.MATH, shard_rows=32, executor="local"))


def busy(store: StageStore, record: dict, stage: str) -> dict[str, list]:
    return {store.manifest(stage, k).extra.get("teacher"): store.manifest(stage, k).timings["busy"]
            for k in record["stages"][stage]}


def test_sampling_and_verification_overlap_and_the_bytes_do_not_change(tmp_path, small_verify_shards):
    solver = adder("So the answer is \\boxed{{{value}}}.")
    with ScriptedServer(solver, delay_s=0.05) as server:
        recipe = sampled_recipe(tmp_path, server.url)
        barrier = build(tmp_path / "barrier", recipe, False)
        server.max_in_flight = 0
        streaming = build(tmp_path / "streaming", recipe, True)
        assert server.max_in_flight > 5  # both teachers at once (4 each at most)
    assert streaming["stages"] == barrier["stages"]
    assert content(streaming) == content(barrier)
    store = StageStore(tmp_path / "streaming")
    sampled, verified = busy(store, streaming, "candidates"), busy(store, streaming, "verdicts")
    for teacher in ("a", "b"):  # its first verdicts before its last samples
        assert verified[teacher][0][0] < sampled[teacher][-1][1]
    assert sampled["b"][0][0] < sampled["a"][-1][1] and sampled["a"][0][0] < sampled["b"][-1][1]
    shares = RunRecord.from_json(streaming).busy_shares()  # where the time went
    assert set(shares) == {"problems", "candidates", "verdicts", "problem_stats", "genselect"}
    assert shares["candidates"][0] > 0 and 0 < shares["verdicts"][1] < 1
    said = CliRunner().invoke(app, ["runs", "--run", streaming["run_id"], "--store", str(tmp_path / "streaming")])
    assert said.exit_code == 0 and f"candidates {shares['candidates'][0]:.1f} s" in said.output, said.output
    old = StageStore(tmp_path / "barrier")  # the control: node after node, no overlap
    sampled, verified = busy(old, barrier, "candidates"), busy(old, barrier, "verdicts")
    assert verified["a"][0][0] >= sampled["a"][-1][1] and sampled["b"][0][0] >= sampled["a"][-1][1]


CHILD = """
import sys
sys.path.insert(0, {helpers!r})
from crash_build import LocalRun  # noqa: F401 (the same imports as the parent's builds)
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.config import load_recipe
from bonforge.engine.run import StreamingRun, execute
from bonforge.flows.build import dag
from bonforge.stages import verify
from bonforge.storage.store import StageStore
import dataclasses
verify.MATH = dataclasses.replace(verify.MATH, shard_rows=32, executor="local")
r = load_recipe({recipe!r}, ["engine.streaming=true"])
execute(dag, StreamingRun(StageStore({store!r}), r), {folder!r}, None, record_start=True)
"""


def parts(store: Path) -> dict[str, set[str]]:
    """Every part file written, by stage folder."""
    out: dict[str, set[str]] = {}
    for p in (store / "stages").glob("*/*/part-*.parquet"):
        out.setdefault(f"{p.parent.parent.name}/{p.parent.name}", set()).add(p.name)
    return out


def test_a_streaming_build_killed_midway_resumes_to_the_same_bytes(tmp_path, small_verify_shards):
    solver = adder("So the answer is \\boxed{{{value}}}.")
    with ScriptedServer(solver, delay_s=0.05) as server:
        recipe = sampled_recipe(tmp_path, server.url)
        clean = build(tmp_path / "clean", recipe, False)
        store = tmp_path / "store"
        code = CHILD.format(helpers=str(HELPERS), recipe=str(recipe), store=str(store), folder=str(tmp_path))
        child = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "BONFORGE_QUIET": "1"},
                                 start_new_session=True)
        deadline = time.monotonic() + 120
        while not any(k.startswith("verdicts/") for k in parts(store)) and time.monotonic() < deadline:
            assert child.poll() is None, "the build ended before it was killed"
            time.sleep(0.05)
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        written = parts(store)
        committed = {k: (store / "stages" / k / "manifest.json").read_bytes() for k in written
                     if (store / "stages" / k / "manifest.json").exists()}
        assert any(k.startswith("verdicts/") for k in set(written) - set(committed))
        assert not StageStore(store).exists("genselect", clean["stages"]["genselect"][0])
        again = build(store, recipe, True)
    assert content(again) == content(clean) and again["stages"] == clean["stages"]
    s = StageStore(store)
    for folder, names in written.items():  # every shard written before the kill was kept, none computed again
        stage, key = folder.split("/")
        if folder in committed:
            assert (store / "stages" / folder / "manifest.json").read_bytes() == committed[folder]
        else:
            assert s.manifest(stage, key)["shards_resumed"] == len(names), folder


def test_the_prefect_build_streams_one_task_per_stage(tmp_path, small_verify_shards, shared_prefect):
    from bonforge.flows.build import build as prefect_build

    solver = adder("So the answer is \\boxed{{{value}}}.")
    with ScriptedServer(solver, delay_s=0.05) as server:
        recipe = sampled_recipe(tmp_path, server.url)
        barrier = build(tmp_path / "barrier", recipe, False)
        server.max_in_flight = 0
        streamed = prefect_build(load_recipe(str(recipe), ["engine.streaming=true"]), str(tmp_path / "streaming"),
                                 str(tmp_path)).json()
        assert server.max_in_flight > 5  # both teachers at once (4 each at most)
    assert streamed["status"] == "succeeded" and streamed["stages"] == barrier["stages"]
    assert content(streamed) == content(barrier)
    store = StageStore(tmp_path / "streaming")
    sampled, verified = busy(store, streamed, "candidates"), busy(store, streamed, "verdicts")
    assert verified["a"][0][0] < sampled["a"][-1][1]


def test_early_stopping_streams_to_the_same_keys_and_bytes(tmp_path, small_verify_shards):
    solver = adder("So the answer is \\boxed{{{value}}}.")
    with ScriptedServer(solver, delay_s=0.01) as server:
        recipe = sampled_recipe(tmp_path, server.url)
        barrier = build(tmp_path / "barrier", recipe, False, "filter.early_stop=true", "filter.max_pass_rate=0.5")
        asked = server.count
        streaming = build(tmp_path / "streaming", recipe, True, "filter.early_stop=true", "filter.max_pass_rate=0.5")
        assert server.count - asked == asked  # the same samples drawn
    assert streaming["stages"] == barrier["stages"] and streaming["stages"]["rounds"]
    assert content(streaming) == content(barrier)
