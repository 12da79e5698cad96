"""The code reward through the real sandbox: fractions of tests passed, verdict classes, one warm pool
for every call of a process (its containers are not restarted between calls)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bonforge.rewards.code import code_reward, compute_score
from bonforge.sandbox.config import CodeVerifyConfig

pytestmark = pytest.mark.docker
SPEC = json.dumps({"kind": "stdio",
                   "tests": [{"input": "2 3\n", "output": "5\n"}, {"input": "10 -4\n", "output": "6\n"}]})


def fenced(program: str) -> str:
    return f"Here is my solution.\n```python\n{program}\n```\n"


def our_containers() -> list[str]:
    names = subprocess.run(["docker", "ps", "--format", "{{.Names}}"], capture_output=True, text=True, check=True)
    return sorted(n for n in names.stdout.split() if n.startswith(f"bonforge-sbx-{os.getpid()}-"))


def test_code_reward_scores_the_fraction_passed_in_one_warm_pool(sandbox_image):
    before = set(our_containers())  # pools of earlier tests in this process
    info = {"problem_id": "add", "question": "Add two integers.",
            "verify": json.dumps(CodeVerifyConfig(image=sandbox_image, time_limit_s=2).key_config())}  # fmt: skip
    rm = {"style": "rule", "ground_truth": SPEC}
    right = "a, b = map(int, input().split())\nprint(a + b)"
    half = "a, b = map(int, input().split())\nprint(a + b if a < 5 else 0)"
    scores = code_reward([None] * 4, [fenced(right), fenced(half), fenced("import sys\nsys.exit(3)"), "no code"],
                         reward_model=[rm] * 4, extra_info=[info] * 4, pool_size=2)  # fmt: skip
    assert scores == [1.0, 0.5, 0.0, 0.0]
    warm = sorted(set(our_containers()) - before)
    assert len(warm) == 2
    again = compute_score("bonforge/x", fenced(half), SPEC, info, pool_size=2)
    assert again == {"score": 0.5, "status": "wrong_answer", "tests_passed": 1, "tests_total": 2}
    crash = compute_score("bonforge/x", fenced("raise SystemExit(input())"), SPEC, info, pool_size=2)
    assert (crash["score"], crash["status"]) == (0.0, "runtime_error")
    assert sorted(set(our_containers()) - before) == warm  # the same containers served every call


MEMORY_CHILD = r"""
import json, sys
from bonforge.rewards.code import score_batch

image, checked = sys.argv[1], sys.argv[2] == "checker"
# the first token is the answer (the checker reads it; without a checker the outputs are compared whole)
checker = ('#include <cstdio>\n#include <cstring>\nint main(int c, char** v) {\n'
           '  char o[64] = {0}, a[64] = {0};\n  FILE* out = fopen(v[2], "r"); FILE* ans = fopen(v[3], "r");\n'
           '  if (fscanf(out, "%63s", o) != 1) return 2;\n  if (fscanf(ans, "%63s", a) != 1) return 3;\n'
           '  return strcmp(o, a) == 0 ? 0 : 1;\n}\n')
spec = {"kind": "stdio", "tests": [{"input": f"{i}\n", "output": f"{i}\n"} for i in range(4)]}
if checked:
    spec["checker"] = {"source": checker}
info = {"problem_id": "p", "question": "", "verify": json.dumps({"image": image, "time_limit_s": 5.0})}
flood = "import sys\nsys.stdout.write('x' * ((1 << 20) - 64))\n"  # each test: 1 MiB of a wrong answer
right = "print(input())\n"

def batch(programs, tag):
    texts = [f"```python\n# {tag} {i}\n{p}```" for i, p in enumerate(programs)]  # distinct: none deduplicated
    return score_batch(texts, [json.dumps(spec)] * len(texts), [info] * len(texts), pool_size=2)

def status(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key + ":"))

batch([flood, right], "warm")  # imports, the pools' start, the checker's build, the first outcomes
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak RSS starts again from here
before = status("VmRSS")
out = batch([flood] * 47 + [right], "large")
print(json.dumps({"statuses": [r["status"] for r in out], "grew_mb": (status("VmHWM") - before) / 1024}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("checked", ["checker", "plain"])
def test_a_reward_batch_reads_each_output_as_it_arrives(sandbox_image, checked):
    """48 responses x 4 stdio tests x 1 MiB of output (a stdio problem with a checker program, and without):
    the host's peak RSS (VmHWM, in a child process) grows by at most 32 MiB. With a checker, every output
    waited for the batch's end to be read (~181 MiB); now each is read by the checker as its outcome arrives
    and dropped. Control: the verdicts are the same (the floods wrong, the right program passed)."""
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", MEMORY_CHILD, sandbox_image, checked], capture_output=True,
                          text=True, env=env, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["statuses"] == ["wrong_answer"] * 47 + ["passed"], got
    assert got["grew_mb"] <= 32, got


def test_trl_gets_none_for_a_verdict_without_a_label(monkeypatch):
    """A response whose verdict is no label (infra_error, sandbox_error) has no reward: TRL's reward function
    gives None (TRL leaves it out), verl's ``compute_score`` 0.0 with the status beside it."""
    from bonforge.rewards import code as reward

    verdicts = [{"score": 0.0, "status": "infra_error"}, {"score": 1.0, "status": "passed"},
                {"score": 0.0, "status": "sandbox_error"}, {"score": 0.0, "status": "wrong_answer"}]
    monkeypatch.setattr(reward, "score_batch", lambda texts, *a, **k: verdicts[: len(texts)])
    assert reward.code_reward(["p"] * 4, ["a"] * 4, [{"ground_truth": "{}"}] * 4) == [None, 1.0, None, 0.0]
    assert reward.compute_score("d", "a", "{}") == {"score": 0.0, "status": "infra_error"}
