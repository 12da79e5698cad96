"""The host judges outcomes as they arrive and keeps only what a verdict needs: a batch of programs that
each print the output limit does not hold every output at once (peak RSS measured in a child process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

CHILD = r"""
import json, resource, sys
import pyarrow as pa
from bonforge.judging.code import verify_code
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.pool import SandboxPool

image, n = sys.argv[1], int(sys.argv[2])
cfg = CodeVerifyConfig(image=image, pool_size=2, time_limit_s=2.0, memory_mb=256, extraction="raw")
spec = json.dumps({"kind": "stdio", "tests": [{"input": f"{i}\n", "output": "1\n"} for i in range(4)]})
problems = pa.table({"problem_id": ["p"], "question": [""], "tests": [spec]})

def cands(k):
    # each test prints just under the 1 MiB output limit (a wrong answer); programs distinct (none deduplicated)
    texts = [f"import sys\nsys.stdout.write('x' * ((1 << 20) - 64))  # {i}\n" for i in range(k)]
    return pa.table({"candidate_id": [f"c{i}" for i in range(k)], "problem_id": ["p"] * k, "teacher": ["t"] * k,
                     "text": texts})

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

with SandboxPool(cfg) as pool:
    verify_code(problems, cands(2), cfg, pool=pool)  # warm: imports, threads, the first outcomes
    before = peak_mb()
    out = verify_code(problems, cands(n), cfg, pool=pool).to_pylist()
    after = peak_mb()
print(json.dumps({"statuses": sorted({v["status"] for v in out}), "rows": len(out), "raised_mb": after - before}))
"""


def test_a_batch_of_large_outputs_does_not_hold_them_all(sandbox_image):
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", CHILD, sandbox_image, "48"], capture_output=True, text=True,
                          env=env, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["statuses"] == ["wrong_answer"] and got["rows"] == 48
    # 48 responses x 4 tests x 1 MiB held until the batch was judged raised the peak by 353 MiB before this
    assert got["raised_mb"] < 100, got
