"""Killing a sampling run midway and rerunning it generates only the missing shards, and the result is
the same table a clean run writes (real openai engine, real local server, real stage store)."""

from __future__ import annotations

import os
from pathlib import Path
import signal
import subprocess
import sys
import textwrap
import time

import pyarrow as pa
import pytest
from llm_server import ScriptedServer
from sampling import sample_stage

from bonforge.llm.config import OpenAITeacher
from bonforge.schema import CANDIDATES, PROBLEMS
from bonforge.stage import RowsMissing
from bonforge.storage.store import StageStore
from bonforge.stages.sample import key_config

HELPERS = Path(__file__).resolve().parents[1] / "helpers"  # sampling.py & co., for the child

STAGE = "candidates"
N_PROBLEMS, N_SAMPLES, SHARD = 10, 2, 3  # shards of 3, 3, 3, 1 problems


def problems() -> pa.Table:
    rows = [{"problem_id": f"gsm8k/{i}", "source": "gsm8k", "domain": "math", "question": f"What is {i} + {i}?",
             "answer": str(2 * i), "tests": None, "metadata": "{}"} for i in range(N_PROBLEMS)]
    return pa.Table.from_pylist(rows, schema=PROBLEMS)


def teacher(url: str) -> OpenAITeacher:
    return OpenAITeacher(engine="openai", name="served", model="m", base_url=url, n=N_SAMPLES, max_tokens=16,
                         shard_problems=SHARD, max_concurrency=1, max_retries=0, api_key_env=None)


def sorted_rows(table: pa.Table) -> list[dict]:
    return table.sort_by("candidate_id").to_pylist()


def clean_run(tmp_path) -> pa.Table:
    store = StageStore(tmp_path / "clean")
    with ScriptedServer() as server:
        man = sample_stage(store, problems(), teacher(server.url))
    return store.read(STAGE, man["key"])


def test_failure_midway_then_rerun_resumes(tmp_path):
    store = StageStore(tmp_path / "store")
    fail_from = 2 * SHARD * N_SAMPLES + 1  # the 2nd request of the third shard fails (not retried)
    with ScriptedServer(lambda n, body: (400, {}, {"error": "boom"}) if n >= fail_from else (200, {}, None)) as s1:
        with pytest.raises(RowsMissing, match=r"5 rows missing \(not asked: the batch stopped at a failure: 4, "
                                              r"HTTP 400 .*boom.*: 1\)"):
            sample_stage(store, problems(), teacher(s1.url))
    assert s1.count == fail_from + 1  # the batch stopped at the client error: the fourth shard not begun
    key = next((store.root / "stages" / STAGE).iterdir()).name
    assert store.done_shards(STAGE, key) == {0, 1} and not store.exists(STAGE, key)
    assert len(store.partials(STAGE, key)) == 1  # the third shard's one answer before the error, kept

    with ScriptedServer() as s2:
        man = sample_stage(store, problems(), teacher(s2.url))
    assert s2.count == (N_PROBLEMS - 2 * SHARD) * N_SAMPLES - 1  # neither finished shards nor kept rows again
    assert man["key"] == key and man["shards_resumed"] == 2 and man["rows"] == N_PROBLEMS * N_SAMPLES
    # the resumed shards' rows were computed by the interrupted run: this one reused them
    assert man["rows_resumed"] == 2 * SHARD * N_SAMPLES
    assert man.counts() == (s2.count, 2 * SHARD * N_SAMPLES + 1)
    assert man["tokens"]["completion"] == 7 * N_PROBLEMS * N_SAMPLES  # totals cover resumed shards too
    assert man["throughput"]["completion_tokens"] == 7 * s2.count
    assert man["teacher"] == "served" and man["problems_short_of_n_count"] == 0

    table = store.read(STAGE, key)
    assert table.schema == CANDIDATES
    assert sorted_rows(table) == sorted_rows(clean_run(tmp_path))

    with ScriptedServer() as s3:
        again = sample_stage(store, problems(), teacher(s3.url))
    assert again["cached"] and s3.count == 0


_CHILD = textwrap.dedent("""
    import sys
    sys.path[:0] = [{here!r}, {helpers!r}]
    from test_shards_resume import problems, teacher
    from sampling import sample_stage
    from bonforge.storage.store import StageStore
    sample_stage(StageStore({root!r}), problems(), teacher({url!r}))
""")


def test_sigkill_midway_then_rerun_resumes(tmp_path):
    store = StageStore(tmp_path / "store")
    with ScriptedServer(delay_s=0.02) as slow:
        code = _CHILD.format(here=os.path.dirname(__file__), helpers=str(HELPERS), root=str(store.root), url=slow.url)
        child = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "BONFORGE_QUIET": "1"})
        stage_dir = store.root / "stages" / STAGE
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and child.poll() is None:
            keys = list(stage_dir.iterdir()) if stage_dir.is_dir() else []
            if keys and len(store.done_shards(STAGE, keys[0].name)) >= 2:
                break
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL, "the child finished before it could be killed"
    key = keys[0].name
    done = store.done_shards(STAGE, key)
    assert 2 <= len(done) < 4 and not store.exists(STAGE, key)

    with ScriptedServer() as rerun:
        man = sample_stage(store, problems(), teacher(rerun.url))
    expected = sum(min(SHARD, N_PROBLEMS - SHARD * i) for i in range(4) if i not in done) * N_SAMPLES
    assert rerun.count == expected and man["shards_resumed"] == len(done)
    assert sorted_rows(store.read(STAGE, key)) == sorted_rows(clean_run(tmp_path))
    assert man["key"] == key and key_config(teacher(rerun.url)) == man["config"]
