"""Warm services: ``bonforge up`` starts a Prefect server, a Ray head and the warm builder (``builder.py``)
once, in their own sessions, and records where they are in ``<BONFORGE_HOME>/services.json`` (default
``~/.config/bonforge``); builds find them there (``current``) and use them instead of starting their own;
``bonforge down`` stops them.

Only what this module started is stopped, by the process groups it recorded (never ``ray stop``, which
would stop every Ray instance of the machine). The Ray head has its own token (token authentication on)
and its own temp dir.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bonforge.runtime.folders import home
from bonforge.services.prefect_server import database_env, free_port, healthy, reason
from bonforge.errors import BonforgeError

BUILDER = "bonforge.services.builder"  # the warm builder's module, also the marker of its command line
WHERE = {"prefect": "url", "ray": "address", "builder": "socket"}  # per service, the field saying where it is
MARKER = {"prefect": "prefect", "ray": "ray", "builder": BUILDER}  # per service, in its command line


def record_path() -> Path:
    return home() / "services.json"


def _alive(pid: int, marker: str) -> bool:
    """Whether ``pid`` runs and is the process we started (its command line names ``marker``)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False  # our child, and it has exited
        child = True
    except ChildProcessError:
        child = False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline or (child and not cmdline)  # empty: our child, just started, in its exec


def _listening(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def _start(argv: list[str], log: Path, env: dict) -> int:
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc.pid


def _wait(ready, pid: int, marker: str, what: str, log: Path, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if not _alive(pid, marker) or time.monotonic() > deadline:
            _stop(pid, marker)
            output = log.read_bytes()[-20000:].decode(errors="replace") if log.is_file() else ""
            raise BonforgeError(f"{what} did not start: {reason(output)} (see {log})")
        time.sleep(0.2)


def ray_env(services: dict) -> dict[str, str]:
    """The environment a driver needs to join the recorded Ray head."""
    return {"RAY_ADDRESS": services["ray"]["address"], "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": services["ray"]["token_path"]}


def _start_ray(log: Path, env: dict, num_cpus: int | None) -> tuple[int, str, str]:
    """Start a Ray head; returns its pid, address and temp dir."""
    port = free_port()
    temp = tempfile.mkdtemp(prefix="bfray-", dir="/tmp")  # short: Ray's socket paths are length-limited
    argv = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--node-ip-address",
            "127.0.0.1", "--port", str(port), "--include-dashboard", "false", "--temp-dir", temp,
            "--disable-usage-stats", *(["--num-cpus", str(num_cpus)] if num_cpus else [])]  # fmt: skip
    return _start(argv, log, env), f"127.0.0.1:{port}", temp


def up(num_cpus: int | None = None) -> dict:
    """Start the services unless the recorded ones still answer; returns the record."""
    from bonforge.storage.fs import atomic_write_json
    from bonforge.storage.run_record import utc_now

    running = current()
    if running:
        return running
    down()  # what is left of an earlier `up` (some services gone)
    state = home()
    state.mkdir(parents=True, exist_ok=True)
    env = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "0", **os.environ}  # UI: set it to 1
    env.pop("PREFECT_API_URL", None)
    env.update(database_env())  # its own, per Prefect version (see bonforge.services.prefect_server)
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    prefect_log = state / "prefect.log"
    prefect_pid = _start([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port",
                          str(port)], prefect_log, env)  # fmt: skip
    token = state / "ray_auth_token"
    token.touch(mode=0o600)
    token.write_text(secrets.token_hex(16))
    ray_log = state / "ray.log"
    ray_env = {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    ray_pid, address, temp = _start_ray(ray_log, ray_env, num_cpus)
    builder_dir = tempfile.mkdtemp(prefix="bfbuild-", dir="/tmp")  # mode 0700: the socket is this user's
    sock = os.path.join(builder_dir, "builder.sock")
    builder_log = state / "builder.log"
    builder_pid = 0
    try:
        _wait(lambda: healthy(url), prefect_pid, "prefect", "the Prefect server", prefect_log)
        try:
            _wait(lambda: _listening(address), ray_pid, "ray", "the Ray head", ray_log)
        except BonforgeError:  # Ray gives its raylet a fixed 30 s to register, which a busy machine can miss
            shutil.rmtree(temp, ignore_errors=True)
            ray_pid, address, temp = _start_ray(ray_log, ray_env, num_cpus)
            _wait(lambda: _listening(address), ray_pid, "ray", "the Ray head", ray_log)
        # only now: its imports would compete for the CPU with the Ray head's start, which has a deadline
        builder_pid = _start([sys.executable, "-c", f"import sys; from {BUILDER} import serve; serve(sys.argv[1])",
                              sock], builder_log, env)  # fmt: skip
        _wait(lambda: os.path.exists(sock), builder_pid, BUILDER, "the warm builder", builder_log)
    except BonforgeError:
        for name, pid in (("prefect", prefect_pid), ("ray", ray_pid), ("builder", builder_pid)):
            if pid:
                _stop(pid, MARKER[name])
        shutil.rmtree(builder_dir, ignore_errors=True)
        raise
    record = {
        "started": utc_now(),
        "prefect": {"url": url, "pid": prefect_pid, "log": str(prefect_log)},
        "ray": {"address": address, "pid": ray_pid, "log": str(ray_log), "temp_dir": temp,
                "token_path": str(token)},
        "builder": {"socket": sock, "pid": builder_pid, "log": str(builder_log)},
    }  # fmt: skip
    atomic_write_json(record_path(), record)
    return record


def read() -> dict | None:
    path = record_path()
    return json.loads(path.read_text()) if path.is_file() else None


def check(record: dict) -> dict[str, bool]:
    """Which recorded services answer (one missing from the record does not)."""
    answers = {
        "prefect": lambda r: healthy(r["url"]),
        "ray": lambda r: _listening(r["address"]),
        "builder": lambda r: os.path.exists(r["socket"]),
    }
    return {name: name in record and _alive(record[name]["pid"], MARKER[name]) and answer(record[name])
            for name, answer in answers.items()}


def current() -> dict | None:
    """The recorded services when both answer, else None."""
    record = read()
    return record if record and all(check(record).values()) else None


def _stop(pid: int, marker: str) -> bool:
    if not _alive(pid, marker):
        return False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and _alive(pid, marker):
            time.sleep(0.2)
        if not _alive(pid, marker):
            break
    try:
        os.killpg(pid, signal.SIGKILL)  # what outlived the group's leader
    except ProcessLookupError:
        pass
    return True


def down() -> dict[str, bool]:
    """Stop the recorded services and forget them; returns which were running."""
    record = read()
    if record is None:
        return {}
    stopped = {name: _stop(record[name]["pid"], marker) for name, marker in MARKER.items() if name in record}
    shutil.rmtree(record["ray"]["temp_dir"], ignore_errors=True)
    if "builder" in record:
        shutil.rmtree(os.path.dirname(record["builder"]["socket"]), ignore_errors=True)
    record_path().unlink(missing_ok=True)
    return stopped
