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
            kwargs["address"] = address
        else:
            kwargs.update(num_cpus=num_cpus, include_dashboard=False)
        if threading.current_thread() is threading.main_thread():
            _init(ray, **kwargs)
        else:
            _init_on_keeper(ray, kwargs)
    return ray


def _init_on_keeper(ray: Any, kwargs: dict) -> None:
    """``_init`` from a thread that lives as long as the process: the local cluster's processes (GCS, raylet)
    are made to die with the *thread* that started them (Linux's parent-death signal follows the thread), so a
    cluster started by a stage's thread of a streaming build was killed when that stage ended, and the build
    with it (``Failed to connect to GCS``)."""
    done, failed = threading.Event(), []

    def keep() -> None:
        try:
            _init(ray, **kwargs)
        except BaseException as e:  # noqa: BLE001 (raised in the caller's thread)
            failed.append(e)
        finally:
            done.set()
        threading.Event().wait()  # never set: the thread, and the cluster's processes with it, last

    threading.Thread(target=keep, name="bonforge-ray-keeper", daemon=True).start()
    done.wait()
    if failed:
        raise failed[0]


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
