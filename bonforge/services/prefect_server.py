"""A Prefect API server in a child process on a free local port, for one build (see ``services``), and the
database of every Prefect server bonforge starts.

Prefect's default database (``$PREFECT_HOME/prefect.db``) is shared by every Prefect version on the
machine: a newer one migrates it, and from then on an older one no longer starts ("Can't locate revision").
The servers bonforge starts (this one, and those of ``bonforge up``) therefore use a database of their own
per Prefect version, ``$PREFECT_HOME/bonforge-<version>/prefect.db``, unless one is configured
(``PREFECT_SERVER_DATABASE_CONNECTION_URL`` or its older name ``PREFECT_API_DATABASE_CONNECTION_URL``).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from bonforge.errors import BonforgeError

log = logging.getLogger("bonforge")
CONFIGURED = ("PREFECT_SERVER_DATABASE_CONNECTION_URL", "PREFECT_API_DATABASE_CONNECTION_URL")


def database_env() -> dict[str, str]:
    """The environment that gives a Prefect server bonforge starts its database (empty: one is configured)."""
    import prefect
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    if set(CONFIGURED) & set(settings.to_environment_variables(exclude_unset=True)):
        return {}
    folder = Path(settings.home).expanduser() / f"bonforge-{prefect.__version__}"
    folder.mkdir(parents=True, exist_ok=True)
    return {CONFIGURED[0]: f"sqlite+aiosqlite:///{folder / 'prefect.db'}"}


def reason(output: str) -> str:
    """Why a server did not start, in one line: the last exception its output names, else its last line."""
    lines = [x.strip() for x in output.strip().splitlines() if x.strip()]
    errors = [x for x in lines if re.match(r"^[\w.]+(Error|Exception|Exit): ", x)]
    return (errors or lines or ["no output"])[-1][:500]


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
    """Send Prefect's queued logs and events before its server goes (else they fail at exit, loudly). In a
    thread of its own: where an event loop runs in this thread (a notebook's cell), Prefect would hand back a
    coroutine instead of waiting, and the drain would neither happen nor be awaited."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    def drain() -> None:
        for worker in (APILogWorker, EventsWorker):
            try:
                worker.drain_all(timeout=10)
            except RuntimeError:  # never started
                pass

    thread = threading.Thread(target=drain, name="bonforge-drain-prefect")
    thread.start()
    thread.join()


class TemporaryServer:
    """A Prefect API server in a child process on a free local port, for this build only."""

    def __init__(self) -> None:
        self.log = tempfile.TemporaryFile()
        self._launch()

    def _launch(self) -> None:
        import prefect
        from prefect.settings import get_current_settings

        self.port = free_port()
        self.database = database_env()
        self._since = os.fstat(self.log.fileno()).st_size  # where this launch's output starts
        env = {
            **os.environ,
            "PREFECT_UI_ENABLED": "0",
            "PREFECT__SERVER_EPHEMERAL": "1",
            "PREFECT__SERVER_FINAL": "1",
            **get_current_settings().to_environment_variables(exclude_unset=True),
            **self.database,
        }
        argv = [
            sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), "-m", "uvicorn",
            "--app-dir", str(prefect.__module_path__.parent),
            "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(self.port),
            "--log-level", "error", "--lifespan", "on",
        ]  # fmt: skip
        # A session of its own: a terminal's Ctrl-C (sent to the whole foreground group) reaches the build, which
        # stops this server itself, never the server in the middle of the build's last requests.
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                     start_new_session=True)

    def _output(self, since: int) -> str:
        """The server's output from byte ``since`` on (its last 20,000 bytes)."""
        self.log.seek(max(since, os.fstat(self.log.fileno()).st_size - 20000))
        return self.log.read().decode(errors="replace")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def wait(self, timeout: float = 180.0) -> str:
        """The API URL once the server answers; a BonforgeError saying why (one line) when it exits or does
        not answer in time."""
        deadline = time.monotonic() + timeout  # generous: a loaded 2-core machine is slow
        while time.monotonic() < deadline:
            if self.proc.poll() == 3 and "address already in use" in self._output(self._since).lower():
                self._launch()  # the port was taken meanwhile (uvicorn's exit code 3 is any failed start)
            elif self.proc.poll() is not None:
                break
            if healthy(self.url):
                return self.url
            time.sleep(0.1)
        output = self._output(self._since)
        how = "exited" if self.proc.poll() is not None else f"did not answer within {timeout:g} s"
        self.stop()
        where = f" (database {self.database[CONFIGURED[0]]})" if self.database else ""
        raise BonforgeError(f"the build's Prefect server {how}{where}: {reason(output)}")

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
