"""The one place a bonforge process joins or starts Ray (a leaf: engines and the engine layer both use it)."""

from __future__ import annotations

import logging
import os
import signal
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
            _init(ray, address=address, **kwargs)
        else:
            _init(ray, num_cpus=num_cpus, include_dashboard=False, **kwargs)
    return ray


def _init(ray: Any, **kwargs: Any) -> None:
    """``ray.init``, leaving SIGTERM to this process: Ray's driver sets a handler that exits at once, wherever
    the main thread is (a build stops cleanly instead: ``runtime.interrupt``); off the main thread (a stage of
    a streaming build) it sets none and warns that it did not, which is what bonforge wants."""
    main = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGTERM) if main else None
    worker_log = logging.getLogger("ray._private.worker")
    worker_log.addFilter(_no_sigterm_warning)
    try:
        ray.init(**kwargs)
    finally:
        worker_log.removeFilter(_no_sigterm_warning)
        if handler is not None:
            signal.signal(signal.SIGTERM, handler)


def _no_sigterm_warning(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("SIGTERM handler is not set")


def ray_up() -> bool:
    """Whether this process has joined Ray already (without importing Ray). Then even a lone shard goes to a
    Ray worker, whose warm state (math-verify checkers, sandbox pools) outlives the task, instead of warming
    up a copy here."""
    ray = sys.modules.get("ray")  # (another thread may be importing it: not up yet, and not whole)
    is_initialized = getattr(ray, "is_initialized", None)
    return is_initialized is not None and is_initialized()
