"""benchmarks/gpu_check.sh cannot run without a GPU: its dry run (GPU_CHECK_DRY=1) lists every step's command,
and the builds' overrides are read here as the GPU machine's `bonforge run` reads them."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from bonforge.config import load_recipe

ROOT = Path(__file__).resolve().parents[2]


def _dry(**env: str) -> list[str]:
    out = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh")], capture_output=True, text=True,
                         env={**os.environ, "GPU_CHECK_DRY": "1", **env}, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def _commands(lines: list[str]) -> dict[str, list[str]]:
    """Step name -> its command (the `== NAME (at most Ns): COMMAND` lines)."""
    steps = {}
    for line in lines:
        if line.startswith("== "):
            head, command = line[3:].split(": ", 1)
            steps[head.split(" ")[0]] = shlex.split(command)
    return steps


def test_dry_run_lists_every_step_bounded_and_runs_nothing():
    lines = _dry()
    steps = _commands(lines)
    assert list(steps) == ["install", "vllm", "build-streaming-false", "build-streaming-true", "pytest"]
    assert all("(at most " in line for line in lines if line.startswith("== "))
    assert steps["install"][-1] == ".[dev,vllm]"
    assert steps["vllm"][1:4] == ["benchmarks/vllm_engine.py", "--device", "gpu"]
    assert steps["pytest"][1:5] == ["-m", "pytest", "-m", "gpu"]
    assert not any(line.startswith("figure ") for line in lines)  # nothing ran, so no figure
    assert lines[-1].startswith("gpu check: dry run, done")


def test_the_builds_differ_only_in_streaming_and_their_recipe_loads_for_the_gpu():
    steps = _commands(_dry(PROBLEMS="16"))
    barrier, streaming = steps["build-streaming-false"], steps["build-streaming-true"]
    assert [a for a, b in zip(barrier, streaming) if a != b] == [
        next(a for a in barrier if "store-" in a), "engine.streaming=false"]
    sets = [streaming[i + 1] for i, a in enumerate(streaming) if a == "--set"]
    recipe = load_recipe(ROOT / streaming[4], sets)
    assert recipe.engine.streaming is True and recipe.problems.limit == 16
    assert recipe.teachers[0].device == "gpu" and recipe.teachers[0].engine == "vllm"
    assert load_recipe(ROOT / barrier[4], [barrier[i + 1] for i, a in enumerate(barrier) if a == "--set"]
                       ).engine.streaming is False


def test_skip_install_leaves_the_install_out():
    assert "install" not in _commands(_dry(GPU_CHECK_SKIP_INSTALL="1"))
