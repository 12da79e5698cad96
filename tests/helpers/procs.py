"""Subprocess helpers of the operations tests: free ports, and `bonforge` commands run in their own
process group so that a test can kill a build with everything it started (Prefect's server, Ray)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
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
