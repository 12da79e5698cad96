"""`--file-times` (tests/conftest.py, used by .ci/run) ends the report with the seconds each test file took,
slowest first, its tests counted, and the total."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_report_ends_with_seconds_per_test_file():
    files = ["tests/test_manifest.py", "tests/storage/test_gc.py"]
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--file-times", *files],
                         cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    lines = out.stdout.strip().splitlines()
    at = next(i for i, line in enumerate(lines) if "seconds per test file" in line)
    rows = [re.match(r"^\s*([\d.]+) s\s+(\d+) tests  (.+)$", line) for line in lines[at + 1:-1]]
    assert all(rows) and len(rows) == 3, lines[at:]
    assert sorted(r.group(3) for r in rows[:2]) == sorted(files) and rows[2].group(3) == "(all files)"
    secs = [float(r.group(1)) for r in rows]
    assert secs[0] >= secs[1] and abs(secs[0] + secs[1] - secs[2]) <= 0.11  # slowest first; the total adds up
    tests = int(rows[2].group(2))
    assert tests == int(rows[0].group(2)) + int(rows[1].group(2)) > 2
    assert re.match(rf"^{tests} passed in ", lines[-1])  # the table ends the report, after --durations
