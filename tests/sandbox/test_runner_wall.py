"""A wall-clock limit on a busy machine (``runner.run_test``, ``wire.LOAD_STRETCH``, ``judging.code``): a test's
wall limit counts the program's own time, its wall time less the time its processes waited for a CPU. A program
the machine starves passes as it does on an idle machine; one the machine keeps from finishing within the
stretch is ``unfinished`` and runs again alone, each time allowed to wait longer, and is ``infra_error`` (no label)
only when the last run alone does not finish either; a program that sleeps, or burns its CPU limit, stays
``timeout``.

The load is made where the runner runs: busy processes pinned to its CPU, each in a session (an autogroup) of
its own, so the scheduler shares that CPU evenly between them and each test (a session of its own too)."""

from __future__ import annotations

import os
import time

import pytest

from code_shapes import one_problem
from procs import busy

from bonforge.judging.code import verify_code
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox import wire
from bonforge.sandbox.pool import SandboxPool

# Burns exactly ``{cpu}`` s of CPU (the process's own clock), then answers.
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {cpu}:\n    pass\nprint(5)\n"
SLEEP = "import time\ntime.sleep(30)\nprint(5)\n"
LOOP = "while True:\n    pass\n"
SPEC = {"kind": "stdio", "tests": [{"input": "", "output": "5\n"}]}


@pytest.fixture
def on_cpu0():
    """A process-backend pool whose runner lives on CPU 0 (started there; this process is not)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    try:
        pool = SandboxPool(CodeVerifyConfig(backend="process", pool_size=1, time_limit_s=1.0, wall_factor=1.0,
                                            retries=0, extraction="raw"))  # fmt: skip
        pool.start()
    finally:
        os.sched_setaffinity(0, before)
    yield pool
    pool.close()


def judge(pool, programs: list[str], **cfg) -> list[dict]:
    problems, cands = one_problem(SPEC, programs)
    return verify_code(problems, cands, pool.cfg.model_copy(update=cfg), pool=pool).to_pylist()


def test_a_program_the_machine_starves_passes_and_a_sleeper_does_not(on_cpu0):
    """0.4 s of CPU under a 2 s wall limit, on a CPU shared with 8 busy processes: ~3.6 s of wall. Before, the
    wall limit killed it (``timeout``); now its own time counts (0.4 s). A sleeper's own time is its wall."""
    programs = [BURN.format(cpu=0.4), SLEEP]
    idle = judge(on_cpu0, programs)
    assert [v["status"] for v in idle] == ["passed", "timeout"], idle
    with busy(8, [0]):
        start = time.monotonic()
        loaded = judge(on_cpu0, programs)
        took = time.monotonic() - start
    assert [v["status"] for v in loaded] == ["passed", "timeout"], loaded
    assert took > 2.5, took  # the load was real: the program took longer than its wall limit


@pytest.mark.parametrize("how", ["os.nice(19)", "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))"])
def test_a_program_that_lowers_its_own_priority_makes_its_own_waits(on_cpu0, how):
    """A program that makes itself wait (a lower priority, the idle scheduling policy) is
    not starved by the machine: its wait counts as its own time, and past its wall limit it is ``timeout``, as
    a sleeper (else a policy could earn 'no label' instead of a penalty by starving itself). The same program
    without the change passes under the same load (the test above)."""
    program = f"import os\n{how}\n" + BURN.format(cpu=0.4)
    with busy(8, [0]):
        (verdict,) = judge(on_cpu0, [program])
    assert verdict["status"] == "timeout", verdict


class Spy:
    """The pool, recording each batch's requests' stretches (None: the first pass's ``LOAD_STRETCH``)."""

    def __init__(self, pool):
        self.pool, self.cfg, self.stretches = pool, pool.cfg, []

    def run(self, requests):
        self.stretches.append([r.get("stretch") for r in requests])
        return self.pool.run(requests)


def test_a_program_the_machine_keeps_from_finishing_finishes_alone(on_cpu0):
    """Starved past the first pass's stretch (20 busy processes on its CPU: 1/21 of it; 0.4 s of CPU take ~8 s,
    its budget of 0.5 s stretched 10 times is 5 s), a program short of its own limits is unfinished, runs again
    alone with a larger stretch (``wire.rerun_stretches``: 40), finishes there and passes, as idle. Before, it
    ran alone once more under the same stretch, still unfinished: infra_error. The pool's host limit follows the
    request's stretch (it would have ended the run alone at 8 s)."""
    program = BURN.format(cpu=0.4)
    spy = Spy(on_cpu0)
    with busy(20, [0]):
        (verdict,) = judge(spy, [program], candidate_wall_s=0.5)
    assert verdict["status"] == "passed", verdict
    assert [40.0] in spy.stretches, spy.stretches  # the load was real: the first pass did not finish it
    stretched = wire.Request.read({"id": 0, "kind": "stdio", "tests": [{}], "time_limit": 1.0, "wall_limit": 2.0,
                                   "memory_mb": 64, "output_limit": 1024, "budget": 0.5, "stretch": 40.0})
    assert spy.pool.request_timeout(stretched) == 23.0


def test_a_program_the_machine_keeps_from_finishing_even_alone_is_no_label(on_cpu0, monkeypatch):
    """With runs alone allowed no more than the first pass's allowance (``ALONE_WALL_S`` 3 s: one run alone,
    stretch 10), the same starved program is unfinished there too, and then infra_error: reward 0, no label.
    Idle, it passes."""
    monkeypatch.setattr(wire, "ALONE_WALL_S", 3.0)
    program = BURN.format(cpu=0.4)
    assert judge(on_cpu0, [program], candidate_wall_s=0.5)[0]["status"] == "passed"
    spy = Spy(on_cpu0)
    with busy(20, [0]):
        (verdict,) = judge(spy, [program], candidate_wall_s=0.5)
    assert verdict["status"] == "infra_error", verdict
    assert "the machine was too busy" in verdict["detail"], verdict
    assert verdict["reward"] == 0.0 and not verdict["correct"]
    assert spy.stretches[-1] == [10.0], spy.stretches


@pytest.mark.docker
def test_under_load_right_programs_pass_and_loops_time_out(sandbox_image):
    """Eight busy processes per core beside the sandbox (here a container then gets ~1/75 of a CPU): a right
    Python program and a right C++ program using 0.2 s of CPU under a 1 s limit (wall limit 3 s) take ~15 s
    and pass, the C++ build too (before: ``timeout``, and a build past its wall limit ``compile_error``); a
    sleeper and an infinite loop are ``timeout`` (the loop under a 0.1 s limit: within the stretch, it reaches
    its CPU limit even on this share of a CPU)."""
    cpp = ("#include <cstdio>\n#include <ctime>\nint main(){clock_t t=clock(); volatile long s=0;\n"
           "while (clock()-t < CLOCKS_PER_SEC/5) s++;\nstd::printf(\"5\\n\");}\n")
    cfg = CodeVerifyConfig(image=sandbox_image, pool_size=2, time_limit_s=1.0, memory_mb=256, extraction="raw",
                           retries=0)  # fmt: skip
    with SandboxPool(cfg) as pool:
        with busy(8, sorted(os.sched_getaffinity(0))):
            start = time.monotonic()
            right = judge(pool, [BURN.format(cpu=0.2), f"```cpp\n{cpp}```"], extraction="auto")
            took = time.monotonic() - start
            wrong = judge(pool, [SLEEP, LOOP], time_limit_s=0.1)
    assert [v["status"] for v in right] == ["passed", "passed"], right
    assert [v["status"] for v in wrong] == ["timeout", "timeout"], wrong
    assert took > cfg.wall_limit_s, took  # the load was real: longer than a test's wall limit


# A program that makes itself wait for a CPU with processes of its own (each busy with a CPU limit of its own),
# or that keeps the runner (on its CPU) busy reading a byte at a time from its stderr.
OWN_HOGS = ("import os\nfor _ in range(20):\n    if os.fork() == 0:\n        while True:\n            pass\n"
            "while True:\n    pass\n")
CHATTER = "import os\nwhile True:\n    os.write(2, b'x')\n"


@pytest.mark.parametrize("program", [OWN_HOGS, CHATTER], ids=["own-hogs", "stderr-chatter"])
def test_a_program_cannot_starve_itself_into_no_label(on_cpu0, program):
    """Attacks: the waits a program's own processes cause (20 busy children on its CPU: the loop gets 1/21 of
    it, past the stretch) or the runner's reading of its output are its own doing; its processes' CPU counts as
    its time, so it is ``timeout``, never ``unfinished``/``infra_error``. Control: the honest starved program
    passes (``test_a_program_the_machine_starves_passes_and_a_sleeper_does_not``)."""
    (verdict,) = judge(on_cpu0, [program], time_limit_s=0.3)
    assert verdict["status"] == "timeout", verdict
