"""Whether the process that writes a run is still alive.

A build records ``status: running`` when it starts and its end when it ends; a build that is killed (or
whose machine goes down) never records its end. So a running record also names its process: host, pid,
the process's start time (clock ticks since boot, from ``/proc``: a pid that was reused by another
process has another start time) and the kernel's boot id (a reboot restarts the clock). A reader on the
same host whose recorded process is gone sees the run as failed (``settle``); on another host it cannot
tell, and the run stays running.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from bonforge.runtime.processes import pid_alive


def stamp() -> dict:
    """This process, as a running record names it."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _start(os.getpid()), "boot": _boot()}


def gone(process: dict) -> bool:
    """Whether the recorded process is known to have ended (False: it runs, or this host cannot tell)."""
    if process.get("host") != socket.gethostname():
        return False
    if process.get("boot") and _boot() and process["boot"] != _boot():
        return True  # the machine restarted since
    pid = process.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    start = _start(pid)
    if start is None:
        return not _exists(pid)
    return start == "zombie" or (process.get("start") is not None and start != process["start"])


def settle(record: dict) -> dict:
    """``record``, shown as failed when it says running but its process is gone (the file is not changed)."""
    process = record.get("process")
    if record.get("status") != "running" or not isinstance(process, dict) or not gone(process):
        return record
    return {**record, "status": "failed",
            "error": f"the build's process (pid {process.get('pid')} on {process.get('host')}) is gone: it was "
                     "killed or crashed before it could record its end"}


def _start(pid: int) -> int | str | None:
    """The start time of ``pid`` in clock ticks since boot, ``"zombie"`` for an exited process that its
    parent has not reaped yet, None where /proc cannot tell (no such process, or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the name, in parentheses, may hold spaces
    return "zombie" if fields[0] in ("Z", "X") else int(fields[19])


def _exists(pid: int) -> bool:
    if Path("/proc/self/stat").exists():
        return False  # /proc works here and has no such process
    return pid_alive(pid)


def _boot() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
