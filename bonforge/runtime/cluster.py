"""The one place a bonforge process joins or starts Ray (a leaf: engines and the engine layer both use it)."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any


_STARTING = threading.Lock()  # a stage's thread may start Ray (``engine.shards``): never two at once


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> Any:
    """Join the Ray cluster at ``address`` (or ``RAY_ADDRESS``), else start a local one; once per process.
    Returns the ``ray`` module: a caller that starts Ray imports it from here (``ray = ensure_ray()``), never
    before, so that the authentication mode below is set when Ray is first imported."""
    address = address or os.environ.get("RAY_ADDRESS")
    if not address and "ray" not in sys.modules:
        # Ray's documented setting, made explicit: a local cluster starts with token authentication (its
        # default), and Ray prints no banner about that default on every build. Ray reads it when imported
        # (set later, the driver and the cluster it starts would disagree): a process that imported Ray
        # first keeps Ray's default, banner included.
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    import ray

    with _STARTING:
        if ray.is_initialized():
            return ray
        kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False, "configure_logging": False}
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(num_cpus=num_cpus, include_dashboard=False, **kwargs)
    return ray


def ray_up() -> bool:
    """Whether this process has joined Ray already (without importing Ray). Then even a lone shard goes to a
    Ray worker, whose warm state (math-verify checkers, sandbox pools) outlives the task, instead of warming
    up a copy here."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()
