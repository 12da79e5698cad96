"""A cheap denial of the sandbox: a program that makes the kernel's OOM killer pick the runner costs fresh
containers and a control run. It must cost nothing but its own verdict (real Docker engine)."""

from __future__ import annotations

import pytest

from test_sandbox import ADD, assert_pool_healthy, judge

pytestmark = pytest.mark.docker

# Socket buffers are kernel memory charged to the container's cgroup but to no process's RSS: the OOM
# killer, weighing RSS and oom_score_adj, would pick the largest process at the same score.
FILL = """import socket
pairs = []
while True:
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    a.setblocking(False)
    try:
        while True:
            a.send(b'x' * 65536)
    except BlockingIOError:
        pass
    pairs.append((a, b))
"""
RESET = "for name, value in (('oom_score_adj', '{adj}'), ('oom_adj', '0')):\n    try:\n" \
        "        with open('/proc/self/' + name, 'w') as f:\n            f.write(value)\n    except OSError:\n" \
        "        pass\n"  # fmt: skip

HOSTILE = {
    "reset to 0, then fill": RESET.format(adj=0) + FILL,
    "reset to -1000, then fill": RESET.format(adj=-1000) + FILL,
    "a subprocess resets and fills": "import subprocess, sys\n"
                                     f"subprocess.run([sys.executable, '-c', {RESET.format(adj=0) + FILL!r}])\n",
    "fill without a reset": FILL,
}


def replacements_started(pool) -> None:
    """Wait for the workers the pool is replacing in the background (each is started by the batch that
    lost its predecessor, not by the next one)."""
    for slot in list(pool._slots.queue):
        if slot[1:] and slot[1] is not None:
            slot[1].result()


def test_the_oom_killer_picks_the_program(docker_pool, monkeypatch):
    """Each hostile program gets memory_limit from its one run, and no control program runs. The program
    cannot write its own oom_score_adj (1000): its container stays. A process it execs can lower its own
    to the floor: where the engine grants the runner CAP_SYS_RESOURCE that floor is 1000 and the runner
    -1000, so the container stays too; elsewhere the OOM killer may take the runner, and the container's
    OOM event makes it the program's memory_limit at the cost of one fresh container, started by that
    batch (it used to be started lazily by the next batch, which then looked as if it had cost one)."""
    started, controls = [], []
    spawn, control = docker_pool._spawn, docker_pool._control_passes
    monkeypatch.setattr(docker_pool, "_spawn", lambda: started.append(1) or spawn())
    monkeypatch.setattr(docker_pool, "_control_passes", lambda slot: controls.append(1) or control(slot))
    guarded = all(w.oom_guard for w in docker_pool._workers)
    for name, program in HOSTILE.items():
        before = len(started)
        verdicts = judge(docker_pool, [program, ADD])
        replacements_started(docker_pool)
        # (on a loaded machine the 1 s CPU limit may come before the memory is full)
        assert verdicts[0]["status"] in ("memory_limit", "timeout"), (name, verdicts[0]["detail"])
        assert verdicts[1]["status"] == "passed", name
        assert len(started) - before <= (1 if "subprocess" in name and not guarded else 0), name
        assert not controls, name
    assert_pool_healthy(docker_pool)


def test_the_program_cannot_lower_its_score(docker_pool):
    """The tests' processes run at oom_score_adj 1000 and cannot write it back down."""
    probe = "for v in ('0', '-1000', '999'):\n    try:\n        open('/proc/self/oom_score_adj', 'w').write(v)\n" \
            "    except OSError:\n        pass\nprint(open('/proc/self/oom_score_adj').read())\n"  # fmt: skip
    spec = {"kind": "stdio", "tests": [{"input": "", "output": "1000"}]}
    [verdict] = judge(docker_pool, [probe], spec)
    assert verdict["status"] == "passed", verdict["detail"]
