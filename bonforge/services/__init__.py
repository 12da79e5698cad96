"""The services a build runs in, behind one seam.

* ``for_build(recipe)``: Prefect's API and Ray for one build (what the engine calls, nothing else);
* ``hand_over(...)``: give a command to the warm builder of ``bonforge up`` (what ``bonforge run`` calls).

Inside: ``warm.py`` (``bonforge up`` / ``down``: a Prefect server, a Ray head and the warm builder, recorded in
the user's state folder), ``builder.py`` (the warm builder: a preloaded process that forks one child per
command) and ``prefect_server.py`` (a temporary Prefect server for one build). The engine imports none of
them: a build outside ``bonforge up`` loads only what it starts.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bonforge.config import Recipe

log = logging.getLogger("bonforge")


def quiet_prefect() -> None:
    """Defaults for an offline, quiet Prefect in this process (each can be overridden in the environment)."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")  # the client's too, and its notice on a new PREFECT_HOME
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")
    # Prefect's 20 s default for its temporary server to answer is too short on a busy machine.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")


def hand_over(module: str, command: str, **kwargs) -> int | None:
    """Run ``command`` of ``module`` with ``kwargs`` in the warm builder of ``bonforge up``; its exit code, or
    None when no builder runs or it declines (the caller then runs the command itself)."""
    from bonforge.services.builder import hand_over as to_builder

    return to_builder(module, command, **kwargs)


@contextlib.contextmanager
def for_build(recipe: Recipe) -> Iterator[None]:
    """Prefect's API and Ray for one build.

    Configured ones come first (``PREFECT_API_URL`` or a profile; the recipe's ``ray.address`` or
    ``RAY_ADDRESS``, joined at once), then the warm services of ``bonforge up`` (Ray joined only when a stage
    needs it). Otherwise a temporary Prefect server runs for the build: the same uvicorn command Prefect uses
    for its own temporary server, launched here straight away and without importing Prefect's server code
    into this process (Prefect's way imports it here first, then again in the server). It stops when the
    build ends, or when this process dies. A local Ray starts only when a stage first has several shards to
    map (``engine.shards``; at once beside the server when the recipe sets ``ray.num_cpus``): a small build
    or a filter change, whose stages are one shard each, computes them in this process and never pays
    Ray's start (seconds; on a loaded machine it can time out).

    A flow run on one of these servers of ours sends no heartbeats: they serve to find crashed runs on a
    server that outlives them, and Prefect waits for its heartbeat thread at the end of a flow. Flows on a
    configured server keep them."""
    from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from bonforge.runtime.cluster import ensure_ray
    from bonforge.services import builder, warm
    from bonforge.services.prefect_server import TemporaryServer, drain_prefect_clients

    builder.prefect_settings_from_caller()  # in the warm builder: the caller's, not the builder's
    up = warm.current()
    url = None if PREFECT_API_URL.value() else up and up["prefect"]["url"]
    ray_env = {} if recipe.ray.address or os.environ.get("RAY_ADDRESS") or not up else warm.ray_env(up)
    if up and (url or ray_env):
        log.info("using the services of `bonforge up`:%s%s", f" Prefect at {url}" if url else "",
                 f" Ray at {ray_env['RAY_ADDRESS']}" if ray_env else "")
    server = None if PREFECT_API_URL.value() or url else TemporaryServer()
    try:
        if not ray_env and (recipe.ray.address or os.environ.get("RAY_ADDRESS") or recipe.ray.num_cpus):
            ensure_ray(recipe.ray.address, recipe.ray.num_cpus)  # meanwhile the server starts
        url = server.wait() if server else url
        ours = {PREFECT_API_URL: url, PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}
        with temporary_settings(updates=ours) if url else contextlib.nullcontext(), _environ(ray_env):
            yield
    finally:
        if server:
            from bonforge.runtime.interrupt import received

            if not received():  # stopped by a signal: no time to send Prefect's queued events
                drain_prefect_clients()
            server.stop()


@contextlib.contextmanager
def _environ(updates: dict[str, str]) -> Iterator[None]:
    """``updates`` in ``os.environ`` for the block (Ray reads its address and token there)."""
    old = {k: os.environ.get(k) for k in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
