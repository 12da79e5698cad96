"""Whether a process of this host still runs: the one question that a lock, a temp file, a run record and a
sandbox container's owner label each ask of the pid they name."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether a process with id ``pid`` exists on this host (one of another user counts: it exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
