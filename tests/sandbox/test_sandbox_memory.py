"""The host judges outcomes as they arrive and keeps only what a verdict needs: a batch of programs that
each print the output limit does not hold every output at once, in the stage and in the code reward, for
stdio and assert-style problems alike (peak RSS measured in a child process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

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


REWARD_CHILD = r"""
import json, resource, sys
from bonforge.rewards.code import score_batch

image, kind = sys.argv[1], sys.argv[2]
# each response answers 4 tests (4 calls of an assert-style check) with 1 MiB each: wrong, distinct programs
if kind == "assert":
    spec = {"kind": "assert", "entry_point": "f",
            "check": "def check(c):\n    for i in range(4):\n        assert c(i) == 'x'\ncheck(f)\n"}
    body = "def f(i):\n    return 'y' * ((1 << 20) - 64)\n"
else:
    spec = {"kind": "stdio", "tests": [{"input": f"{i}\n", "output": "1\n"} for i in range(4)]}
    body = "import sys\nsys.stdout.write('x' * ((1 << 20) - 64))\n"
info = {"problem_id": "p", "question": "", "verify": json.dumps({"image": image, "time_limit_s": 2.0,
                                                                 "output_limit_bytes": 8 << 20})}

def batch(k, tag):
    texts = [f"```python\n# {tag} {i}\n{body}```" for i in range(k)]
    return score_batch(texts, [json.dumps(spec)] * k, [info] * k, pool_size=2)

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

batch(2, "warm")  # imports, the pool's and the checker's start, the first outcomes
warm = peak_mb()
small = batch(8, "small")
after_small = peak_mb()
large = batch(48, "large")
after_large = peak_mb()
print(json.dumps({"statuses": sorted({r["status"] for r in small + large}), "rows": len(large),
                  "small_mb": after_small - warm, "large_mb": after_large - warm}))
"""


@pytest.mark.parametrize("kind", ["assert", "stdio"])
def test_a_reward_batch_holds_no_more_for_more_responses(sandbox_image, kind):
    """The code reward's extra host memory is bounded by the pool (``judging.code.HOST_ANSWERS_PER_WORKER``
    answers per worker), not by the batch: 48 responses raise the peak no more than 8 do. An assert-style
    run's answers are replayed by its check as they arrive, then dropped."""
    from bonforge.judging.code import HOST_ANSWERS_PER_WORKER

    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", REWARD_CHILD, sandbox_image, kind], capture_output=True, text=True,
                          env=env, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["statuses"] == ["wrong_answer"] and got["rows"] == 48
    answer_mb = 4 * 1  # one response's answer: 4 tests x 1 MiB
    # before: the assert-style batch of 48 raised the peak by 210 MiB, 8 by 52 MiB (call lines held per chunk)
    assert got["large_mb"] < HOST_ANSWERS_PER_WORKER * 2 * answer_mb + 16, got
    assert got["large_mb"] - got["small_mb"] < 16, got
