"""``BONFORGE_NO_SKIPS=1`` (tests/helpers/no_skips.py, set by .ci/run): a skip without the gpu mark fails the run;
a gpu-marked skip and a passing test do not; without the variable a skip is a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HELPERS = Path(__file__).resolve().parent / "helpers"
TESTS = """
import pytest

def test_passes():
    pass

@pytest.mark.gpu
def test_needs_a_gpu():
    pytest.skip("no CUDA GPU")

def test_needs_a_part():
    if {skip}:
        pytest.skip("no data mirror")
"""


def run(tmp_path: Path, enforced: bool, skip: bool) -> subprocess.CompletedProcess:
    (tmp_path / "test_probe.py").write_text(TESTS.format(skip=skip))
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n  gpu: needs a CUDA GPU\n")
    env = {**os.environ, "PYTHONPATH": str(HELPERS), "BONFORGE_NO_SKIPS": "1" if enforced else "0", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no_skips", "-p", "no:cacheprovider",
                           "test_probe.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_skip_without_the_gpu_mark_fails_the_run_when_enforced(tmp_path):
    out = run(tmp_path, enforced=True, skip=True)
    assert out.returncode == 1, out.stdout
    assert "1 skipped without the gpu mark" in out.stdout and "test_needs_a_part: no data mirror" in out.stdout


def test_a_gpu_skip_and_passing_tests_pass_and_a_skip_is_a_skip_unless_enforced(tmp_path):
    out = run(tmp_path, enforced=True, skip=False)  # only the gpu-marked test skips
    assert out.returncode == 0, out.stdout
    out = run(tmp_path, enforced=False, skip=True)
    assert out.returncode == 0 and "skipped without the gpu mark" not in out.stdout, out.stdout
