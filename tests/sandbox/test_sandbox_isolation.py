"""Isolation with the real engine: a candidate cannot hurt a neighbour, evade a limit, leave state for
the next candidate, or turn its own failure into a sandbox_error."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from bonforge.judging import passes
from bonforge.sandbox import pool as pool_mod
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.pool import HOST_MARGIN_S, SandboxPool
from test_sandbox import ADD, assert_pool_healthy, judge

ONE = {"kind": "stdio", "tests": [{"input": "2 3\n", "output": "5\n"}]}
LIMITS = dict(time_limit_s=1.0, wall_factor=3.0, memory_mb=256, retries=1)  # wall limit 4 s


@pytest.fixture(scope="module", autouse=True)
def nothing_left():
    """After the module (its pools closed): none of the containers or socket folders its workers had is
    left (other pools on this machine may come and go meanwhile)."""
    made = []
    real = pool_mod._Worker.__init__

    def init(self, argv, name, startup_timeout, socket_dir=None, peer_ok=None):
        made.append((name, socket_dir))
        real(self, argv, name, startup_timeout, socket_dir, peer_ok)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pool_mod._Worker, "__init__", init)
        yield
    time.sleep(0.5)
    names = set(subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True,
                               check=True).stdout.split())  # fmt: skip
    assert made and not {name for name, _ in made} & names
    assert [d for _, d in made if d and os.path.exists(d)] == []


@pytest.fixture(scope="module")
def pair(sandbox_image):
    with SandboxPool(CodeVerifyConfig(image=sandbox_image, pool_size=2, **LIMITS)) as pool:
        yield pool


@pytest.fixture(scope="module")
def solo(sandbox_image):
    """One container: each candidate runs where the previous one ran (unless that one was recycled)."""
    with SandboxPool(CodeVerifyConfig(image=sandbox_image, pool_size=1, **LIMITS)) as pool:
        yield pool


# Every process forks: all the pids its container allows, within a second, until the wall limit (the
# pids cgroup stops it, not a per-uid count).
FORK_BOMB = """import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.1)
"""
# A correct program that starts threads and processes while the bomb runs in the other container.
FORKER = """import os, threading, time
time.sleep(1.0)
threads = [threading.Thread(target=time.sleep, args=(0.01,)) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for _ in range(8):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
a, b = map(int, input().split())
print(a + b)
"""


@pytest.mark.docker
def test_a_fork_bomb_does_not_fail_a_forking_program_in_another_container(pair):
    with ThreadPoolExecutor(2) as ex:
        bomb = ex.submit(judge, pair, [FORK_BOMB], ONE)
        time.sleep(0.5)
        forker = ex.submit(judge, pair, [FORKER], ONE)
        (verdict,) = forker.result()
        bomb.result()
    assert verdict["status"] == "passed", verdict
    assert_pool_healthy(pair)


# Two grandchildren, never reaped by the program, burn 0.25 s of CPU each (each under its own RLIMIT_CPU),
# 0.5 s in all where the limit is 0.3 s.
GRANDCHILD_CPU = """import os, time
r, w = os.pipe()
for _ in range(2):
    if os.fork() == 0:
        if os.fork() == 0:
            t = time.process_time()
            while time.process_time() - t < 0.25:
                pass
            os.write(w, b"x")
        os._exit(0)
    os.wait()
os.read(r, 1), os.read(r, 1)
a, b = map(int, input().split())
print(a + b)
"""


@pytest.mark.docker
def test_cpu_of_unreaped_grandchildren_counts(solo):
    # a wall limit (10 s) no load here reaches: the CPU time decides
    (verdict,) = judge(solo, [GRANDCHILD_CPU], ONE, time_limit_s=0.3, wall_factor=30.0)
    assert verdict["status"] == "timeout", verdict
    assert_pool_healthy(solo)


# Tries to SIGSTOP every other process it can see (the runner, the zygote, init), then answers.
STOP_EVERYONE = """import os, signal
for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
    if pid != os.getpid():
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            pass
a, b = map(int, input().split())
print(a + b)
"""


@pytest.mark.docker
def test_a_program_cannot_stop_the_runner(solo):
    start = time.monotonic()
    (verdict,) = judge(solo, [STOP_EVERYONE], ONE)
    assert verdict["status"] == "passed", verdict
    assert time.monotonic() - start < solo.cfg.wall_limit_s
    assert_pool_healthy(solo)


@pytest.mark.docker
def test_a_frozen_sandbox_is_replaced_within_the_host_wall_limit(solo, monkeypatch):
    """The host enforces the wall limit itself: a runner frozen from outside (``docker pause``) is killed
    and replaced. That is the machine's doing, not the program's (no program can stop its runner in a
    container): the request runs again alone on the fresh sandbox, and passes. In one pass (no short first
    pass: the pause must land in the run with the program's own limits, not in a probe that is then run again
    elsewhere); the host's limit without its allowance for a busy machine (``LOAD_STRETCH``), to be quick."""
    monkeypatch.setattr(passes, "PROBE_S", math.inf)
    monkeypatch.setattr(pool_mod, "LOAD_STRETCH", 1.0)
    (name,) = [w.name for w in solo._workers]
    sleeper = "import time\ntime.sleep(1.5)\na, b = map(int, input().split())\nprint(a + b)\n"
    pause = threading.Timer(0.5, subprocess.run, (["docker", "pause", name],), {"capture_output": True})
    start = time.monotonic()
    pause.start()
    (verdict,) = judge(solo, [sleeper], ONE)
    elapsed = time.monotonic() - start
    pause.join()
    assert verdict["status"] == "passed", verdict
    assert elapsed < solo.cfg.wall_limit_s + HOST_MARGIN_S + 6, elapsed  # (+6 s: removal, the run alone)
    assert name not in {w.name for w in solo._workers}
    assert_pool_healthy(solo)


# Leaves what it can for the next candidate: files in /tmp, /dev/shm and /dev/mqueue, a System V shared
# memory segment; then answers right (its own verdict stands).
DIRTY_FILES = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
open("/dev/shm/left", "w").write("x")
open("/tmp/left", "w").write("x")
os.makedirs("/tmp/tree/a/b/c")
libc.mq_open(b"/left", os.O_CREAT | os.O_RDWR, 0o600, None)
libc.shmget(0xB0F, 4096, 0o1000 | 0o666)
a, b = map(int, input().split())
print(a + b)
"""
# Lowers the limits, affinity and priority of every other process it can see, which the next
# candidate's processes would inherit; then answers right.
DIRTY_LIMITS = """import os, resource
for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
    if pid != os.getpid():
        for call in (lambda: resource.prlimit(pid, resource.RLIMIT_DATA, (96 << 20, 96 << 20)),
                     lambda: os.sched_setaffinity(pid, {0}),
                     lambda: os.setpriority(os.PRIO_PROCESS, pid, 19)):
            try:
                call()
            except OSError:
                pass
a, b = map(int, input().split())
print(a + b)
"""
# The next candidate: reports what it finds, then needs 100 MB.
PROBE = """import ctypes, os, resource
libc = ctypes.CDLL(None, use_errno=True)
found = [d for d in ("/tmp", "/dev/shm", "/dev/mqueue") if os.listdir(d)]
if libc.shmget(0xB0F, 0, 0) >= 0:
    found.append("shm segment")
if resource.getrlimit(resource.RLIMIT_DATA)[0] != resource.RLIM_INFINITY:
    found.append("RLIMIT_DATA")
if len(os.sched_getaffinity(0)) != os.cpu_count() or os.getpriority(os.PRIO_PROCESS, 0) != 0:
    found.append("affinity or priority")
x = bytearray(100 << 20)
print(" ".join(found) or "clean")
"""
CLEAN = {"kind": "stdio", "tests": [{"input": "", "output": "clean\n"}]}


@pytest.mark.docker
def test_no_file_or_ipc_object_is_left_for_the_next_candidate(solo):
    before = {w.name for w in solo._workers}
    (dirty,) = judge(solo, [DIRTY_FILES], ONE)
    assert dirty["status"] == "passed", dirty  # its own verdict stands
    assert not before & {w.name for w in solo._workers}  # the System V segment: the container was replaced
    (probe,) = judge(solo, [PROBE], CLEAN)
    assert probe["status"] == "passed", probe
    assert_pool_healthy(solo)


@pytest.mark.docker
def test_a_program_cannot_change_the_runner_for_the_next_candidate(solo):
    (dirty,) = judge(solo, [DIRTY_LIMITS], ONE)
    assert dirty["status"] == "passed", dirty
    (probe,) = judge(solo, [PROBE], CLEAN)
    assert probe["status"] == "passed", probe
    assert_pool_healthy(solo)


MISLABEL = {
    # a forged "the sandbox could not set up" report, on every channel it may find open
    "forged set-up failure": "import os\nfor fd in (3, 4):\n    try:\n"
        "        os.write(fd, b'{\"s\": \"setup\", \"e\": \"forged\"}\\n')\n"
                             "    except OSError:\n        pass\nos._exit(1)\n",
    # a result channel the runner cannot parse (nested beyond any recursion limit)
    "corrupted result channel": "import os\nprint(4, flush=True)\nos.write(3, b'[' * 200000 + b'\\n')\nos._exit(0)\n",
    # a directory tree too deep for a recursive removal, its top mode 000
    "unremovable directory tree": "import os\nos.chdir('/tmp')\nfor _ in range(3000):\n    os.mkdir('d')\n"
                                  "    os.chdir('d')\nprint(4)\n",
}  # fmt: skip


@pytest.mark.docker
@pytest.mark.parametrize("name", list(MISLABEL))
def test_a_wrong_program_gets_a_negative_verdict_not_sandbox_error(solo, name):
    (verdict,) = judge(solo, [MISLABEL[name]], ONE)
    assert verdict["status"] in {"wrong_answer", "runtime_error"}, verdict
    assert_pool_healthy(solo)


@pytest.mark.docker
def test_the_control_program_decides_whose_failure_it_was(solo, monkeypatch):
    """A runner that fails under one program on every fresh worker, while the control program passes, is
    that program's failure (runtime_error); when the control fails too, it is the sandbox's."""
    from bonforge.sandbox import pool as pool_mod

    real_read = pool_mod._Worker.read
    fails = {"victim"}

    def read(worker, request, timeout):
        response = real_read(worker, request, timeout)
        if response.id in fails:
            raise pool_mod.WorkerDied("the runner died")
        return response

    monkeypatch.setattr(pool_mod._Worker, "read", read)
    (verdict,) = [v for v in judge_ids(solo, {"victim": ADD})]
    assert verdict["status"] == "runtime_error" and "control program passed" in verdict["detail"], verdict
    fails.add("bonforge-control")
    (verdict,) = [v for v in judge_ids(solo, {"victim": ADD})]
    assert verdict["status"] == "sandbox_error", verdict
    monkeypatch.undo()
    assert_pool_healthy(solo)


def judge_ids(pool, programs: dict[str, str]) -> list[dict]:
    """Verdicts of programs sent with the given request ids (one test each)."""
    from bonforge.judging.spec import parse_spec
    from bonforge.judging.code_request import build_request
    from bonforge.judging.code_verdict import judge_outcome

    spec = parse_spec(json.dumps(ONE), "p")
    cfg = pool.cfg.model_copy(update={"extraction": "raw"})
    outcomes = pool.run([build_request(spec, p, cfg, rid) for rid, p in programs.items()])
    return [dict(zip(("status", "tests_passed", "tests_total", "detail"), judge_outcome(spec, o, cfg), strict=True))
            for o in outcomes]  # fmt: skip


# Backend process: the runner's parent side and the host's shared scratch places.
HOST_LEFT = ("/tmp/bonforge-isolation-probe", "/dev/shm/bonforge-isolation-probe")
PROCESS_DIRTY = f"""import os, resource
for path in {HOST_LEFT!r}:
    open(path, "w").write("x")
for call in (lambda: resource.prlimit(os.getppid(), resource.RLIMIT_DATA, (16 << 20, 16 << 20)),
             lambda: os.sched_setaffinity(os.getppid(), {{0}})):
    try:
        call()
    except OSError:
        pass
a, b = map(int, input().split())
print(a + b)
"""
PROCESS_PROBE = f"""import os
found = [p for p in {HOST_LEFT!r} if os.path.exists(p)]
x = bytearray(100 << 20)
print(" ".join(found) or "clean")
"""


@pytest.fixture(scope="module")
def process():
    if os.geteuid() != 0:
        pytest.skip("uid separation of backend process needs root")
    with SandboxPool(CodeVerifyConfig(backend="process", pool_size=1, **LIMITS)) as pool:
        yield pool


def test_process_backend_leaves_nothing_for_the_next_candidate(process):
    """Run as root, the process backend gives each worker's tests a uid of their own: the program cannot
    change the runner, and what it leaves in the host's /tmp and /dev/shm is removed."""
    try:
        (dirty,) = judge(process, [PROCESS_DIRTY], ONE)
        left = [p for p in HOST_LEFT if os.path.exists(p)]
        (probe,) = judge(process, [PROCESS_PROBE], CLEAN)
        assert dirty["status"] == "passed", dirty
        assert left == []
        assert probe["status"] == "passed", probe
    finally:
        for path in HOST_LEFT:
            if os.path.exists(path):
                os.unlink(path)


def test_process_backend_counts_the_cpu_of_unreaped_grandchildren(process):
    (verdict,) = judge(process, [GRANDCHILD_CPU], ONE, time_limit_s=0.3, wall_factor=30.0)
    assert verdict["status"] == "timeout", verdict


# Backend process beside Ray: Ray's session folders under /tmp are world-writable with no sticky bit, so a
# program could delete other users' files there, or leave its own where no clean-up looks.
SHARED = "/tmp/bonforge-isolation-shared"
SHARED_DIRTY = f"""import os
try:
    names = os.listdir({SHARED!r})
except OSError:
    names = []
for name in names:
    os.unlink(os.path.join({SHARED!r}, name))
try:
    open(os.path.join({SHARED!r}, "left"), "w").write("x")
except OSError:
    pass
a, b = map(int, input().split())
print(a + b)
"""


def test_process_backend_cannot_touch_the_hosts_shared_folders(process):
    """Run as root, the process backend's workers have a private /tmp, /var/tmp and /dev/shm."""
    os.makedirs(SHARED, exist_ok=True)
    os.chmod(SHARED, 0o777)
    with open(f"{SHARED}/theirs", "w") as f:
        f.write("x")
    try:
        (verdict,) = judge(process, [SHARED_DIRTY], ONE)
        assert verdict["status"] == "passed", verdict
        assert os.listdir(SHARED) == ["theirs"]
    finally:
        shutil.rmtree(SHARED)
