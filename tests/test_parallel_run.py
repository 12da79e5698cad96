"""CI's parallel run (`pytest -n 2 --dist loadgroup`, tests/conftest.py): each test file is one unit of work, all
its tests on one worker in their order, so a module's fixtures (a started server, a built store) start once; the
files that drive a browser run last, in one run as on a worker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_every_file_runs_whole_on_one_worker():
    files = ["tests/test_manifest.py", "tests/storage/test_gc.py", "tests/runtime/test_folders.py"]
    out = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-n", "2", "--dist",
                          "loadgroup", "--no-loadscope-reorder", *files], cwd=REPO, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    ran = re.findall(r"^\[(gw\d)\] .*PASSED (tests/[^:]+)::(\S+)@(\S+)", out.stdout, re.M)
    assert {f for _, f, _, _ in ran} == set(files), out.stdout[-3000:]
    for f in files:
        mine = [(worker, test, group) for worker, file, test, group in ran if file == f]
        assert len({worker for worker, _, _ in mine}) == 1 and {group for _, _, group in mine} == {f}, mine
        assert len(mine) >= 2


@pytest.mark.parametrize("workers", [[], ["-n", "1", "--dist", "loadgroup", "--no-loadscope-reorder"]])
def test_browser_files_run_after_the_rest(workers):
    """Playwright's sync API leaves an event loop running in the main thread until the session ends: a file that
    calls ``asyncio.run`` fails after it. Named first, the browser file still runs after the other."""
    pytest.importorskip("playwright.sync_api")
    files = ["tests/viewer/test_cross_site.py", "tests/llm/test_base.py"]
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers, *files],
                         cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    assert re.search(r"^\d+ passed", out.stdout.splitlines()[-1]), out.stdout[-3000:]
