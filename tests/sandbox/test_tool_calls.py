"""A model's tool calls in the real sandbox: a trajectory's session keeps its own state from call to call and
nothing else's (state planted by one trajectory, files and processes too, is not found by another, nor by a
later call beyond what replay defines again), and the sandbox's hostile programs run as tool calls get the
statuses they get as candidates, the pool healthy after each."""

from __future__ import annotations

import subprocess
import sys

import pytest

from test_sandbox import HOSTILE, assert_pool_healthy

from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.pool import close_shared_pools, shared_pool
from bonforge.sandbox.tool_calls import PythonCalls, replay_program

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def calls(sandbox_image):
    cfg = CodeVerifyConfig(image=sandbox_image, pool_size=2, time_limit_s=2.0)
    yield PythonCalls(cfg, 2.0)
    close_shared_pools()


def test_a_session_keeps_its_own_state_and_no_one_elses(calls):
    plant = ("import os, subprocess\nsecret = 41\nopen('/tmp/planted', 'w').write('x')\n"
             "subprocess.Popen(['sleep', '30'])\nprint('planted')")
    a1, a2, b = calls([[plant], [plant, "print(secret + 1)"], ["import os\nprint(os.path.exists('/tmp/planted'))\n"
                                                               "print('secret' in globals())"]])
    assert (a1.status, a1.stdout) == ("ok", "planted\n")
    assert (a2.status, a2.stdout) == ("ok", "42\n")  # the trajectory's own earlier call, replayed
    assert (b.status, b.stdout) == ("ok", "False\nFalse\n")  # another trajectory finds nothing of it
    (later,) = calls([["import os\nprint([p for p in os.listdir('/proc') if p.isdigit() and "
                       "b'sleep' in open(f'/proc/{p}/cmdline', 'rb').read()])"]])
    assert (later.status, later.stdout) == ("ok", "[]\n")  # the planted process did not outlive its call


def test_an_earlier_call_that_failed_or_printed_is_replayed_silently(calls):
    (run,) = calls([["print('noise')\nx = 1", "raise SystemExit(3)", "import sys; sys.stderr.write('e')", "print(x)"]])
    assert (run.status, run.stdout, run.stderr) == ("ok", "1\n", "")
    (err,) = calls([["y = 1", "print(y)\n1/0"]])
    assert err.status == "runtime_error" and err.stdout == "1\n"
    assert "ZeroDivisionError" in err.stderr and "exec(compile" not in err.stderr  # our replay's frame is cut


def test_the_replay_program_cannot_be_broken_out_of_by_a_cell():
    """Cells that would end a string or a line of the program around them are data to it: each runs as the
    code it is (run here with this interpreter: the cells are harmless)."""
    cells = ['s = """', "'''\nprint(1)", "\\", "{cells!r}", "_cells = []\nt = 2", "print(t, '\"\"\"')"]
    done = subprocess.run([sys.executable, "-c", replay_program(cells)], capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (0, '2 """\n', "")


RUNNABLE = {name: expected for name, (_, expected) in HOSTILE.items()
            if expected <= {"timeout", "memory_limit", "runtime_error", "output_limit"}}


@pytest.mark.parametrize("name", list(RUNNABLE))
def test_hostile_programs_as_tool_calls_get_their_candidate_statuses(calls, name):
    (run,) = calls([[HOSTILE[name][0]]])
    assert run.status in RUNNABLE[name], run
    assert_pool_healthy(shared_pool(calls.cfg))


def test_a_hostile_earlier_call_cannot_spoil_the_next(calls):
    bomb = HOSTILE["fork bomb"][0]
    (run,) = calls([["x = 5", bomb, "print(x)"]])
    assert run.status == "timeout"  # the bomb replays inside the call's own limits: it costs its own call only
    (fine,) = calls([["x = 5", "print(x)"]])
    assert (fine.status, fine.stdout) == ("ok", "5\n")


def test_what_an_earlier_call_wrote_to_the_descriptors_is_not_shown_again(calls):
    """An earlier call's os.write, a child's output and a write past sys.stdout to the real stream are dropped
    on replay like its prints; the new call's own descriptor writes are shown (control)."""
    leaks = ["import os; os.write(1, b'LEAK1\\n'); os.write(2, b'LEAK2\\n')",
             "import subprocess; subprocess.run(['echo', 'LEAK3'])", "import sys; sys.__stdout__.write('LEAK4')"]
    (run,) = calls([[*leaks, "import os; os.write(1, b'new\\n')"]])
    assert (run.status, run.stdout, run.stderr) == ("ok", "new\n", "")
    (binary,) = calls([["import sys; sys.stdout.buffer.write(b'\\xff\\xfe ok\\n')"]])
    assert (binary.status, binary.stdout) == ("ok", "\ufffd\ufffd ok\n")  # bytes no UTF-8 holds: readable text


def test_a_call_that_did_not_run_to_its_end_is_said_not_replayable(calls):
    """A signal or an exit ends the program (it would end every replay after it: the tool loop leaves such a call
    out); a call that raised ran to its end (its error caught), as did one that printed."""
    ended = calls([["import ctypes; ctypes.string_at(0)"], ["import os; os._exit(3)"], ["import sys; sys.exit(4)"],
                   ["x = 1\n1 / 0"], ["print(1)"]])
    assert [(r.status, r.replayable) for r in ended] == [("runtime_error", False)] * 3 + [
        ("runtime_error", True), ("ok", True)]
