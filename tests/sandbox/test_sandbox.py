"""The sandbox with a real engine: every verdict class, hostile programs, pool health, no leftovers."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from code_shapes import one_problem

from bonforge.errors import SandboxError
from bonforge.sandbox import image as image_mod
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.pool import SandboxPool
from bonforge.schema import VERDICTS
from bonforge.judging.code import verify_code

STDIO_ECHO = {"kind": "stdio", "tests": [{"input": "2 3\n", "output": "5\n"}, {"input": "10 -4\n", "output": "6\n"}]}
ADD = "a, b = map(int, input().split())\nprint(a + b)\n"


def judge(pool, programs: list[str], spec: dict = STDIO_ECHO, **overrides) -> list[dict]:
    cfg = pool.cfg.model_copy(update={"extraction": "raw", **overrides})
    problems, cands = one_problem(spec, programs)
    out = verify_code(problems, cands, cfg, pool=pool)
    assert out.schema == VERDICTS
    return out.to_pylist()


def pool_containers() -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label={image_mod.OWNER_LABEL}={image_mod.owner()}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout.split()


def container_processes(cid: str) -> list[str]:
    out = subprocess.run(["docker", "top", cid, "-o", "pid,uid,args"], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[1:]


def assert_pool_healthy(pool) -> None:
    """Right verdicts again, and nothing but init, runner and zygote (all root) left in any container."""
    assert [v["status"] for v in judge(pool, [ADD, ADD])] == ["passed", "passed"]
    containers = [w.name for w in pool._workers]
    assert 1 <= len(containers) <= pool.cfg.pool_size
    assert set(containers) <= set(subprocess.run(["docker", "ps", "--format", "{{.Names}}"], capture_output=True,
                                                 text=True, check=True).stdout.split())  # fmt: skip
    for cid in containers:
        procs = container_processes(cid)
        assert len(procs) == 3 and all(p.split()[1] == "0" for p in procs), f"leftover processes in {cid}: {procs}"


VERDICT_CASES = {
    "passed": ADD,
    "wrong_answer": "print(5)\n",
    "runtime_error": "raise ValueError('nope')\n",
    "compile_error": "def f(:\n",
    "timeout": "while True:\n    pass\n",
    # 64 MB a step: past the pools' 256 MB in five steps, well inside the 1 s limit on a loaded machine (10 MB
    # steps took 26 and, under load, sometimes ran out of time first)
    "memory_limit": "x = []\nwhile True:\n    x.append(bytearray(64 * 2**20))\n",
    "output_limit": "import sys\nwhile True:\n    sys.stdout.write('y' * 65536)\n",
}


@pytest.mark.docker
def test_every_verdict_class(docker_pool):
    verdicts = judge(docker_pool, list(VERDICT_CASES.values()))
    assert [v["status"] for v in verdicts] == list(VERDICT_CASES)
    first = verdicts[0]
    assert (first["correct"], first["reward"], first["tests_passed"], first["tests_total"]) == (True, 1.0, 2, 2)
    wrong = verdicts[1]
    assert (wrong["correct"], wrong["reward"], wrong["tests_passed"]) == (False, 0.5, 1)
    assert "expected" in wrong["detail"]
    assert "ValueError: nope" in verdicts[2]["detail"]
    assert_pool_healthy(docker_pool)


@pytest.mark.docker
def test_call_based_and_assert_kinds(docker_pool):
    call = {"kind": "call", "fn_name": "kth", "wrapped_outputs": True,  # APPS-style: [6] also accepts 6
            "tests": [{"args": [[2, 3, 4, 7, 11], 5], "output": 9}, {"args": [[1, 2, 3, 4], 2], "output": [6]}]}
    solution = "class Solution:\n    def kth(self, arr, k):\n        s = set(arr)\n        i = 0\n" \
               "        while k:\n            i += 1\n            k -= i not in s\n        return i\n"  # fmt: skip
    assert [v["status"] for v in judge(docker_pool, [solution, "def kth(a, k):\n    return 9\n"], call)] == [
        "passed", "wrong_answer"]  # fmt: skip
    check = {"kind": "assert", "entry_point": "inc", "check": "def check(c):\n    assert c(1) == 2\n\ncheck(inc)\n"}
    got = judge(docker_pool, ["def inc(x):\n    return x + 1\n", "def inc(x):\n    return x\n",
                              "import sys\nsys.exit(0)\n",
                              "def inc(x):\n    assert x < 0, 'own assert'\n    return x + 1\n"], check)  # fmt: skip
    # a failed check is a wrong answer; the program's own failing assert is a runtime error
    assert [v["status"] for v in got] == ["passed", "wrong_answer", "runtime_error", "runtime_error"]
    assert "check failed" in got[1]["detail"] and "own assert" in got[3]["detail"]


HOSTILE = {
    "fork bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
                  {"timeout"}),
    "memory bomb": ("s = ' ' * (64 * 2**30)\n", {"memory_limit"}),
    "infinite loop": ("while True:\n    pass\n", {"timeout"}),
    "sleeper": ("import time\ntime.sleep(60)\n", {"timeout"}),
    "network": ("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\nprint(5)\n", {"runtime_error"}),
    "write outside /tmp": ("open('/usr/x', 'w').write('x')\nprint(5)\n", {"runtime_error"}),
    "read host files": (f"print(open({__file__!r}).read())\n", {"runtime_error"}),  # this file, on the host
    "10 MB of output": ("import sys\nsys.stdout.write('z' * 10_000_000)\n", {"output_limit"}),
    "kill the runner": ("import os\nos.kill(os.getppid(), 9)\n", {"runtime_error"}),
    "kill everything": ("import os\nos.kill(-1, 9)\n", {"wrong_answer", "runtime_error"}),  # only itself, if that
    "the host's socket": ("import os, socket\ntry:\n"
        "    socket.socket(socket.AF_UNIX).connect('/run/bonforge/runner.sock')\n"
                          "except OSError:\n    try:\n        open('/run/bonforge/x', 'w')\n    except OSError:\n"
                          "        a, b = map(int, input().split())\n        print(a + b)\n", {"passed"}),
    "signal init": ("import os, signal, time\ntry:\n    os.kill(1, signal.SIGTERM)\nexcept OSError:\n    pass\n"
                    "time.sleep(0.2)\n"
                    "a, b = map(int, input().split())\nprint(a + b)\n", {"passed"}),
}  # fmt: skip


@pytest.mark.docker
@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_program_is_contained(docker_pool, name):
    program, expected = HOSTILE[name]
    (verdict,) = judge(docker_pool, [program])
    assert verdict["status"] in expected, verdict
    assert_pool_healthy(docker_pool)


@pytest.mark.docker
def test_detached_children_are_killed_and_tmp_wiped(docker_pool):
    daemon = (
        "import os, time\nopen('/tmp/left', 'w').write('x')\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(600)\n    os._exit(0)\n"
        "a, b = map(int, input().split())\nprint(a + b)\n"
    )
    assert judge(docker_pool, [daemon])[0]["status"] == "passed"
    assert_pool_healthy(docker_pool)
    probe = "import os\nprint(5 if os.path.exists('/tmp/left') else 'clean')\n"
    assert judge(docker_pool, [probe], {"kind": "stdio", "tests": [{"input": "", "output": "clean"}]})[0][
        "status"] == "passed"  # fmt: skip


@pytest.mark.docker
def test_sandbox_failure_is_retried_then_sandbox_error(sandbox_image, monkeypatch):
    cfg = CodeVerifyConfig(image=sandbox_image, pool_size=1, time_limit_s=1.0, retries=1)
    with SandboxPool(cfg) as pool:
        slow = "import time\ntime.sleep(0.8)\na, b = map(int, input().split())\nprint(a + b)\n"
        [name] = [w.name for w in pool._workers]
        killer = subprocess.Popen(["sh", "-c", f"sleep 0.4; docker kill {name}"], stdout=subprocess.DEVNULL)
        assert judge(pool, [slow])[0]["status"] == "passed"  # the killed container was replaced, and retried
        killer.wait()

        def broken_engine():
            from bonforge.errors import SandboxError

            raise SandboxError("engine gone")

        for worker_name in [w.name for w in pool._workers]:
            subprocess.run(["docker", "kill", worker_name], capture_output=True)
        monkeypatch.setattr(pool, "_spawn", broken_engine)
        (verdict,) = judge(pool, [ADD])
        assert verdict["status"] == "sandbox_error" and "engine gone" in verdict["detail"]
        assert not verdict["correct"]


@pytest.mark.docker
def test_containers_are_isolated(docker_pool):
    probe = (
        "import os, json\nst = open('/proc/self/status').read()\n"
        "cap = [l for l in st.splitlines() if l.startswith(('CapEff', 'NoNewPrivs'))]\n"
        "print(json.dumps([os.getuid(), cap, os.access('/', os.W_OK), sorted(os.listdir('/sys/class/net'))]))\n"
    )
    spec = {"kind": "stdio", "tests": [{"input": "", "output": "x"}]}
    cfg = docker_pool.cfg.model_copy(update={"extraction": "raw"})
    from bonforge.judging.spec import parse_spec
    from bonforge.judging.code import build_request

    [outcome] = docker_pool.run([build_request(parse_spec(json.dumps(spec), "p"), probe, cfg, "probe")])
    uid, caps, root_writable, nets = json.loads(outcome["results"][0]["stdout"])
    assert uid == 65534 and not root_writable and nets == ["lo"]
    assert "CapEff:\t0000000000000000" in caps and "NoNewPrivs:\t1" in caps


@pytest.mark.docker
def test_a_worker_that_does_not_start_leaves_no_container(sandbox_image, monkeypatch):
    """A container whose runner never answers (here: it runs `sleep` instead) is removed."""
    from bonforge.sandbox import container

    real = container.container_spec

    def sleeper(*args, **kwargs):
        return {**real(*args, **kwargs), "command": ["sleep", "60"]}

    monkeypatch.setattr(container, "container_spec", sleeper)
    before = set(pool_containers())
    pool = SandboxPool(CodeVerifyConfig(image=sandbox_image, pool_size=1, startup_timeout_s=3))
    with pytest.raises(SandboxError, match="did not start"):
        pool.start()
    pool.close()
    time.sleep(0.5)
    assert set(pool_containers()) == before


@pytest.mark.docker
def test_close_leaves_no_container(sandbox_image):
    before = set(pool_containers())
    with SandboxPool(CodeVerifyConfig(image=sandbox_image, pool_size=2)) as pool:
        assert len(set(pool_containers()) - before) == 2
        assert pool.run([]) == []
    time.sleep(0.2)
    assert set(pool_containers()) == before


@pytest.mark.docker
def test_an_idle_shared_pool_stops_its_containers_and_the_next_call_starts_new_ones(sandbox_image):
    """A long-lived process (a notebook, a trainer's reward workers) keeps no containers up while idle."""
    from bonforge.sandbox.pool import shared_pool

    cfg = CodeVerifyConfig(image=sandbox_image, pool_size=1, idle_close_s=1.0)
    before = set(pool_containers())
    first = shared_pool(cfg)
    assert [v["status"] for v in judge(first, [ADD])] == ["passed"]
    assert len(set(pool_containers()) - before) == 1
    deadline = time.monotonic() + 15
    while set(pool_containers()) - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert set(pool_containers()) == before and first._closed
    with pytest.raises(SandboxError, match="closed"):
        first.run([])
    again = shared_pool(cfg)
    assert again is not first and [v["status"] for v in judge(again, [ADD])] == ["passed"]
    again.close()


@pytest.mark.docker
def test_attach_transport_gives_the_same_verdicts(sandbox_image):
    """The runner's channel over Docker's attached stdin/stdout (for a daemon on another host)."""
    cfg = CodeVerifyConfig(image=sandbox_image, pool_size=1, time_limit_s=1.0, memory_mb=256, transport="attach")
    with SandboxPool(cfg) as pool:
        verdicts = judge(pool, list(VERDICT_CASES.values()))
    assert [v["status"] for v in verdicts] == list(VERDICT_CASES)


class CountingPool:
    def __init__(self, pool):
        self.pool, self.cfg, self.programs = pool, pool.cfg, []

    def run(self, requests):
        self.programs += [r["program"] for r in requests]
        return self.pool.run(requests)


@pytest.mark.docker
def test_identical_programs_run_once_and_share_the_verdict(docker_pool):
    counting = CountingPool(docker_pool)
    programs = [ADD, "print(5)\n", ADD, "while True:\n    pass\n", ADD, "print(5)\n"]
    verdicts = judge(counting, programs)
    loop = programs[3]  # runs twice: its short first pass (judging.passes.probe), then with its own limits
    assert sorted(counting.programs) == sorted([*{*programs}, loop])
    assert [v["candidate_id"] for v in verdicts] == [f"p/t/{i}" for i in range(6)]
    assert [v["status"] for v in verdicts] == ["passed", "wrong_answer", "passed", "timeout", "passed", "wrong_answer"]
    assert verdicts[0]["latency_ms"] == verdicts[2]["latency_ms"] == verdicts[4]["latency_ms"]


def test_process_backend_gives_the_same_verdicts():
    with SandboxPool(CodeVerifyConfig(backend="process", pool_size=2, time_limit_s=1.0, memory_mb=256)) as pool:
        verdicts = judge(pool, list(VERDICT_CASES.values()))
    assert [v["status"] for v in verdicts] == list(VERDICT_CASES)


INTERRUPTED = """\
import faulthandler, json, signal, sys, threading
faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks where it hangs
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as a terminal gives it: a test run started
# in the background (`cmd &` without job control) hands its children SIGINT ignored
import pyarrow as pa
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.pool import SandboxPool
from bonforge.schema import CANDIDATES, PROBLEMS
from bonforge.judging.code import verify_code
image, how, where = sys.argv[1:]
if how == "thread":  # the kernel may hand a process's SIGINT to any thread that does not block it
    poke = lambda: (sys.stdin.readline(), signal.pthread_kill(threading.get_ident(), signal.SIGINT))
    threading.Thread(target=poke, daemon=True).start()
cfg = CodeVerifyConfig(image=image, pool_size=2, time_limit_s=20, extraction="raw")  # wall limit 61 s
if where == "pool":
    req = {"kind": "stdio", "program": "import time\\ntime.sleep(60)", "prelude": "", "fn_name": None,
           "tests": [{}], "time_limit": 20, "wall_limit": 60, "memory_mb": 256,
           "output_limit": 1024, "stop_on_failure": False}
    with SandboxPool(cfg) as pool:
        print("ready", flush=True)
        pool.run([dict(req, id=i) for i in range(6)])
else:  # the stage: assert-style chunks run in the background while the host replays checks
    spec = {"kind": "assert", "entry_point": "f", "check": "def check(c):\\n    assert c(1) == 2\\n\\ncheck(f)\\n"}
    problems = pa.Table.from_pylist([{"problem_id": "p", "source": "t", "domain": "code", "question": "",
                                      "tests": json.dumps(spec)}], schema=PROBLEMS)
    cands = pa.Table.from_pylist([{"candidate_id": f"p/t/{i}", "problem_id": "p", "teacher": "t", "sample_index": i,
                                   "text": f"import time\\ndef f(x):\\n    time.sleep(60)  # {i}\\n"}
                                  for i in range(200)], schema=CANDIDATES)
    print("ready", flush=True)
    verify_code(problems, cands, cfg)
"""


@pytest.mark.docker
@pytest.mark.parametrize(
    "how,where",
    [("SIGINT", "pool"), ("thread", "pool"), ("thread", "stage"), ("SIGKILL", "pool")],
)
def test_interrupt_or_crash_leaves_no_container(sandbox_image, tmp_path, how, where):
    """Ctrl-C closes the pool soon, whichever thread the signal lands on and wherever the caller waits; after a
    SIGKILL the next pool's start removes the dead owner's containers."""
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED)
    err = tmp_path / "stderr.txt"
    with err.open("w") as err_file:
        proc = subprocess.Popen([sys.executable, str(script), sandbox_image, how, where], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err_file, text=True,
                                cwd=image_mod.RUNNER_PATH.parents[2])  # fmt: skip
    assert proc.stdout.readline().strip() == "ready", err.read_text()
    owner_label = f"label={image_mod.OWNER_LABEL}={image_mod.owner().split(':')[0]}:{proc.pid}"
    deadline = time.monotonic() + 60
    pool_only = ["--filter", owner_label, "--filter", "name=bonforge-sbx-"]  # a check server's container: bonforge-chk-
    while len(running := subprocess.run(["docker", "ps", "-q", *pool_only], capture_output=True,
                                        text=True).stdout.split()) < 2 and time.monotonic() < deadline:  # fmt: skip
        time.sleep(0.2)
    assert len(running) == 2
    time.sleep(1.0)  # the programs are running
    if how == "thread":
        proc.stdin.write("go\n")
        proc.stdin.flush()
    else:
        proc.send_signal(getattr(signal, how))
    try:
        code = proc.wait(timeout=45)  # the programs sleep 60 s: an exit before then did not wait for them
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)  # every thread's stack, into the failure message
        time.sleep(2)
        proc.kill()
        pytest.fail(f"still running 45 s after the interrupt ({how}, {where}):\n{err.read_text()[-6000:]}")
    assert code != 0
    time.sleep(0.5)
    if how == "SIGKILL":
        assert image_mod.cleanup_containers(all_owners=False) >= 0
    argv = ["docker", "ps", "-aq", "--filter", owner_label]
    left = subprocess.run(argv, capture_output=True, text=True).stdout.split()
    assert left == []
