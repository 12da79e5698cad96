"""A Prefect API server in a child process on a free local port, for one build (see ``services``)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

log = logging.getLogger("bonforge")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str, timeout: float = 5) -> bool:
    """Whether the Prefect API at ``url`` answers its health check."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


def drain_prefect_clients() -> None:
    """Send Prefect's queued logs and events before its server goes (else they fail at exit, loudly)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        try:
            worker.drain_all(timeout=10)
        except RuntimeError:  # never started
            pass


class TemporaryServer:
    """A Prefect API server in a child process on a free local port, for this build only."""

    def __init__(self) -> None:
        self.log = tempfile.TemporaryFile()
        self._launch()

    def _launch(self) -> None:
        import prefect
        from prefect.settings import get_current_settings

        self.port = free_port()
        env = {
            **os.environ,
            "PREFECT_UI_ENABLED": "0",
            "PREFECT__SERVER_EPHEMERAL": "1",
            "PREFECT__SERVER_FINAL": "1",
            **get_current_settings().to_environment_variables(exclude_unset=True),
        }
        argv = [
            sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), "-m", "uvicorn",
            "--app-dir", str(prefect.__module_path__.parent),
            "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(self.port),
            "--log-level", "error", "--lifespan", "on",
        ]  # fmt: skip
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def wait(self, timeout: float = 180.0) -> str | None:
        """The API URL once the server answers; None (and a warning: the flow then starts Prefect's own
        temporary server) when it does not start in time."""
        deadline = time.monotonic() + timeout  # generous: a loaded 2-core machine is slow
        while time.monotonic() < deadline:
            if self.proc.poll() == 3:  # the port was taken meanwhile
                self._launch()
            elif self.proc.poll() is not None:
                break
            if healthy(self.url):
                return self.url
            time.sleep(0.1)
        self.log.seek(0)
        tail = self.log.read()[-2000:].decode(errors="replace").strip()
        log.warning("the temporary Prefect server did not start (%s); the flow starts its own", tail or "no output")
        self.stop()
        return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# Run as `python -c _DIE_WITH_PARENT PARENT_PID -m uvicorn ...`: ask the kernel for SIGTERM when the parent
# dies (kept across exec; a preexec_fn is unsafe in a process with threads), then become the server.
_DIE_WITH_PARENT = """
import ctypes, os, signal, sys
ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    sys.exit("bonforge: the build died before its Prefect server started")
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""
