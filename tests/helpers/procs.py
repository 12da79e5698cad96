"""Subprocess helpers of the operations tests: free ports, `bonforge` commands run in their own process group
so that a test can kill a build with everything it started (Prefect's server, Ray), and a busy machine."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(
    args: list[str], env: dict | None = None, log: Path | None = None, cwd: Path | None = None
) -> subprocess.Popen:
    """``python <args>`` in a new process group (in folder ``cwd``); output to ``log`` (or discarded)."""
    out = open(log, "wb") if log else subprocess.DEVNULL
    return subprocess.Popen(
        [sys.executable, *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd
    )


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL, wait_s: float = 15) -> None:
    """Send ``sig`` to the process group of ``proc`` and reap it; escalates to SIGKILL when it lingers."""
    for s in (sig, signal.SIGKILL):
        try:
            os.killpg(proc.pid, s)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # children that outlived the leader
    except ProcessLookupError:
        pass


def run(
    args: list[str], env: dict | None = None, log: Path | None = None, timeout: float = 600, cwd: Path | None = None
) -> int:
    """Run ``python <args>`` to completion (its whole group is killed on timeout); returns the exit code."""
    proc = start(args, env, log, cwd)
    try:
        return proc.wait(timeout)
    finally:
        kill_group(proc)


def wait_for_ray_nodes(env: dict, n: int, proc: subprocess.Popen, log: Path, timeout: float = 180) -> bool:
    """Wait until the Ray cluster that ``env`` points at has ``n`` live nodes: one driver process polls,
    gently (a loaded machine's GCS is slow; a process per poll would pay Ray's import and connect each
    time). False when ``proc`` (the ``ray start`` of the awaited node) ends first: it allows a raylet 30 s
    to register. Fails with the tail of ``log`` past ``timeout``."""
    import time

    code = (
        "import sys, time, ray; ray.init()\n"
        "while sum(x['Alive'] for x in ray.nodes()) < int(sys.argv[1]):\n"
        "    time.sleep(1)\n"
    )
    probe = subprocess.Popen([sys.executable, "-c", code, str(n)], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + timeout
    try:
        while probe.poll() is None:
            if proc.poll() is not None:
                return False
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        return probe.returncode == 0
    finally:
        probe.kill()
        probe.wait()


BUSY = "import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass\n"


@contextlib.contextmanager
def busy(n: int, cpus: list[int]):
    """A busy machine: ``n`` busy processes on each of ``cpus``, each in a session (an autogroup) of its own, so
    that the scheduler shares a CPU evenly between them and each process under test (a session of its own too)."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY.format(cpu=cpu)], start_new_session=True)
             for cpu in cpus for _ in range(n)]  # fmt: skip
    try:
        time.sleep(0.2)
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
