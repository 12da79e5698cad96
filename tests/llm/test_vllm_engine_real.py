"""The `vllm` engine for real on CPU: SmolLM2-135M in a Ray actor (device: cpu), the same code path as on
GPUs. The session's engine (``smol_vllm``) serves the module; a killed run is resumed by it; the benchmark of
the engine runs on it."""

from __future__ import annotations

import os
from pathlib import Path
import signal
import subprocess
import sys
import textwrap
import time

import bench_smoke
import pytest
from real_models import Kept, chat, check_samples, problems, smol_teacher, texts

from bonforge.llm.config import VLLMTeacher
from bonforge.storage.store import StageStore
from sampling import sample_stage

HELPERS = Path(__file__).resolve().parents[1] / "helpers"  # sampling.py & co., for the child

STAGE = "candidates"

pytestmark = pytest.mark.slow
MAX_TOKENS = 16


def teacher(**kw) -> VLLMTeacher:
    """The session engine's teacher (the killed child starts the same engine) with this module's sampling."""
    return smol_teacher(**{**dict(n=3, temperature=1.0, top_p=0.95, max_tokens=MAX_TOKENS, shard_problems=2), **kw})


@pytest.fixture(scope="module")
def engine(smol_vllm):
    return Kept(smol_vllm)


def test_samples_are_seeded_reproducible_and_counted(engine, smollm2):
    from transformers import AutoTokenizer

    reqs = [chat("a", "What is 2 + 3?", n=4, seed=100), chat("b", "Name a fruit.", n=3, seed=7)]
    first = engine.generate(reqs)
    check_samples(first, reqs, MAX_TOKENS)
    assert texts(engine.generate(reqs)) == texts(first)  # same seeds, same samples
    assert texts(engine.generate([chat("a", "What is 2 + 3?", n=4, seed=500)])) != texts(first[:1])
    tok = AutoTokenizer.from_pretrained(smollm2)
    rendered = tok.apply_chat_template(list(reqs[0].messages), tokenize=False, add_generation_prompt=True)
    assert first[0][0].prompt_tokens == len(tok(rendered, add_special_tokens=False)["input_ids"])
    assert {c.engine for cs in first for c in cs} == {"vllm"}


def test_a_stream_gives_what_generate_gives_as_requests_come(engine):
    """The continuous path (``VLLMEngine.stream``): a request put while another runs joins the running engine;
    each comes back whole, with the samples ``generate`` draws (the same seeds, the same texts); a prompt too long
    for the window comes back with none."""
    import queue

    from real_models import LONG

    reqs = [chat("a", "What is 2 + 3?", n=3, seed=100), chat("b", "Name a fruit.", n=2, seed=7)]
    want = engine.generate(reqs)
    out: queue.Queue = queue.Queue()
    stream = engine.engine.stream(out)
    try:
        stream.put(reqs[:1])
        stream.put([reqs[1], chat("long", LONG, n=2, seed=1)])
        got = {r.id: comps for r, comps in (out.get(timeout=300) for _ in range(3))}
    finally:
        stream.close()
    assert texts([got["a"], got["b"]]) == texts(want)
    check_samples([got["a"], got["b"]], reqs, MAX_TOKENS)
    assert got["long"] == []


def test_stage_skips_and_reports_a_prompt_too_long_for_the_window(engine, tmp_path):
    t = teacher()
    man = sample_stage(StageStore(tmp_path), problems(3, long=True), t, engine=engine)
    assert man["rows"] == 3 * t.n and man["skipped_requests"] == 1
    assert man["problems_short_of_n"] == ["real/long"]
    assert man["engine"] == "vllm" and man["tokens"]["completion"] > 0


def test_progress_counts_the_samples_the_replica_finishes(engine):
    heard: list[int] = []
    engine.generate([chat("a", "What is 2 + 3?", n=4, seed=100), chat("b", "Name a fruit.", n=3, seed=7)],
                    heard.append)
    assert heard and heard[-1] == 7 and heard == sorted(heard)


_CHILD = textwrap.dedent("""
    import sys
    sys.path[:0] = [{here!r}, {helpers!r}]
    import ray
    from real_models import Kept, problems
    from test_vllm_engine_real import teacher
    from bonforge.llm.vllm_engine import VLLMEngine
    from bonforge.runtime.cluster import ensure_ray
    from bonforge.storage.store import StageStore
    from sampling import sample_stage
    ensure_ray({address!r})
    engine = VLLMEngine(teacher(shard_problems=1))
    engine.workers = ray.cloudpickle.loads(bytes.fromhex({workers!r}))  # the session's loaded replica
    sample_stage(StageStore({root!r}), problems(), engine.teacher, engine=Kept(engine))
""")


def test_killed_run_resumes_without_regenerating_finished_shards(engine, tmp_path):
    """A run in another process is killed (SIGKILL) after its first shard; the rerun generates only the
    problems of the missing shards, and the table equals a clean run's. The killed run is a Ray driver of its
    own on the session's cluster, sampling on the session's loaded replica (as a second notebook on a cluster
    would): what dies is the run, its store writes cut where they were; a load of its own would cost a minute
    and change nothing of that."""
    import ray

    store = StageStore(tmp_path / "store")
    workers = ray.cloudpickle.dumps(engine.engine.workers).hex()
    code = _CHILD.format(here=os.path.dirname(__file__), helpers=str(HELPERS), root=str(store.root),
                         address=ray.get_runtime_context().gcs_address, workers=workers)
    child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stage_dir, keys = store.root / "stages" / STAGE, []
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and child.poll() is None:
            keys = list(stage_dir.iterdir()) if stage_dir.is_dir() else []
            if keys and store.done_shards(STAGE, keys[0].name):
                break
            time.sleep(0.05)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL, "the child ended before it could be killed"
    key = keys[0].name
    done = store.done_shards(STAGE, key)
    assert 1 <= len(done) < 4 and not store.exists(STAGE, key)

    before = len(engine.requests)
    man = sample_stage(store, problems(), teacher(shard_problems=1), engine=engine)
    regenerated = {r.id for r in engine.requests[before:]}
    assert regenerated == {f"real/{i}" for i in range(4) if i not in done}
    assert man["key"] == key and man["shards_resumed"] == len(done) and man["rows"] == 4 * 3

    clean = sample_stage(StageStore(tmp_path / "clean"), problems(), teacher(shard_problems=1), engine=engine)
    rows = lambda st, k: st.read(STAGE, k).drop_columns(["engine_s"]).sort_by("candidate_id").to_pylist()  # noqa: E731
    # (engine_s, a row's share of the engine's wall time, is a measurement: every other column is the same)
    assert rows(store, key) == rows(StageStore(tmp_path / "clean"), clean["key"])


def test_the_benchmark_runs_on_this_engine(engine, tmp_path, capsys):
    """``benchmarks/vllm_engine.py``'s smoke run (``bench_smoke``): the stage, then raw vLLM in the replica, on
    this module's engine (the script's own start would load the model again); no figure asserted."""
    code = bench_smoke.load("vllm_engine").main(bench_smoke.argv("vllm_engine", tmp_path), engine=engine.engine)
    out = capsys.readouterr().out
    assert code == 0 and bench_smoke.unprinted("vllm_engine", out) == [], out
