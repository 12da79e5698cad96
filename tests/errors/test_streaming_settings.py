"""Streaming's settings in a recipe (``engine.streaming``, a sampled teacher's ``shard_problems``: a shard's
completions are held in memory, at most 1 GiB of them) that cannot hold: one `error:` line naming the field,
exit code 2, before any work (no service started, no store written). The rest of streaming (which nodes share a
resource, the shards in flight) is derived, never set by a recipe: no recipe names a resource."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.config import load_recipe

pytestmark = pytest.mark.usefixtures("no_services")

RECIPE = """
name: s
problems: {name: toy, source: {path: problems.jsonl}}
teachers:
  - {name: t, engine: openai, model: m, base_url: 'http://127.0.0.1:9/v1', n: 2}
export: {name: s}
"""

CASES = {
    "engine.streaming=maybe": "engine.streaming: Input should be a valid boolean",
    "engine.streaming=2": "engine.streaming: Input should be a valid boolean",
    "engine.streming=false": "engine.streming: unknown field; did you mean 'streaming'?",
    "engine.shard_size=8": "engine.shard_size: unknown field; allowed: streaming",
    "teachers.t.shard_problems=0": "teachers.0.shard_problems: Input should be greater than 0 (got 0)",
    # a shard's completions are held in memory: 2 samples x 4096 tokens x ~4 bytes, 1 GiB hold 32768 problems
    "teachers.t.shard_problems=1000000": "teachers.0: shard_problems: 1000000 problems x 2 samples x 4096 tokens "
                                         "may hold 30.5 GiB of completions in memory, over the 1 GiB a shard may "
                                         "hold: at most 32768 problems a shard here",
    "teachers.t.shard_problems=32769": "at most 32768 problems a shard here",
}


def recipe(tmp_path: Path) -> Path:
    (tmp_path / "problems.jsonl").write_text('{"question": "What is 1 + 1?", "answer": "2"}\n')
    (tmp_path / "recipe.yaml").write_text(RECIPE)
    return tmp_path / "recipe.yaml"


@pytest.mark.parametrize("setting", CASES)
def test_a_streaming_setting_that_cannot_hold_is_one_error_line_before_any_work(tmp_path, setting):
    res = CliRunner().invoke(app, ["run", str(recipe(tmp_path)), "--store", str(tmp_path / "store"),
                                   "--set", setting])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    assert CASES[setting] in lines[0]
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("value", [False, True])
def test_control_both_settings_of_streaming_load(tmp_path, value):
    r = load_recipe(recipe(tmp_path), [f"engine.streaming={str(value).lower()}", "teachers.t.shard_problems=1"])
    assert r.engine.streaming is value and r.teachers[0].shard_problems == 1


def test_control_streaming_is_the_default_and_a_shard_at_the_memory_bound_loads(tmp_path):
    r = load_recipe(recipe(tmp_path), ["teachers.t.shard_problems=32768"])
    assert r.engine.streaming is True and r.teachers[0].shard_problems == 32768
