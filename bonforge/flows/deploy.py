"""Scheduled builds on a Prefect server: ``bonforge deploy`` registers a deployment of a recipe with a cron
schedule; ``bonforge serve`` is the long-lived process that executes its runs (scheduled or triggered).

A deployment's parameters are JSON: the recipe's path, its ``--set`` overrides and the store root. Each run
loads the recipe afresh and calls the same ``build`` as ``bonforge run`` (the DAG lives in ``build.py``
only), so a run whose stages are all committed returns in seconds and a changed recipe file takes effect at
the next run. Schedules need a real server (``prefect server start``) named by ``PREFECT_API_URL``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from uuid import UUID

from prefect import flow

from bonforge.errors import ConfigError

FLOW_NAME = "bonforge-scheduled-build"
log = logging.getLogger("bonforge")


@flow(name=FLOW_NAME, log_prints=False)
def scheduled_build(recipe: str, store: str, overrides: list[str] | None = None) -> dict:
    """One run of a deployment: build ``recipe`` (with ``overrides``) into ``store``."""
    from bonforge.config import load_recipe
    from bonforge.flows.build import build

    from bonforge.report.summary import ending_lines
    from bonforge.storage.store import StageStore

    record = build(load_recipe(recipe, overrides or []), store, str(Path(recipe).parent))
    for line in ending_lines(StageStore(store), record):  # in the deployment's log, as `bonforge run` prints it
        log.info("%s", line)
    return {"run_id": record.run_id, "status": record.status, "dataset": record.dataset,
            "dataset_version": record.dataset_version}


def _api_url() -> str:
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise ConfigError(
            "schedules need a Prefect server: start one (`prefect server start`) and set PREFECT_API_URL, "
            "e.g. PREFECT_API_URL=http://127.0.0.1:4200/api"
        )
    return url


def _deployment(name: str, parameters: dict, schedules: list):
    from prefect.types.entrypoint import EntrypointType

    return scheduled_build.to_deployment(
        name=name,
        parameters=parameters,
        schedules=schedules,
        tags=["bonforge"],
        entrypoint_type=EntrypointType.MODULE_PATH,  # the served process imports bonforge, not a file path
    )


def deploy(recipe: Path, cron: str, name: str | None, overrides: list[str], store: Path | str) -> tuple[str, UUID]:
    """Register (or update) the deployment ``name`` (default: the recipe's name); returns (name, id)."""
    from prefect.client.schemas.schedules import CronSchedule

    from bonforge.config import load_recipe

    rec = load_recipe(recipe, overrides)  # a broken recipe fails now, not at the first scheduled run
    _api_url()
    try:
        schedule = CronSchedule(cron=cron, timezone=os.environ.get("TZ") or "UTC")
    except ValueError as e:
        raise ConfigError(f"--cron {cron!r}: not a valid cron expression ({e.errors()[0]['msg']})") from None
    name = name or rec.name
    params = {"recipe": str(recipe.resolve()), "store": str(store), "overrides": list(overrides)}
    return name, _deployment(name, params, [schedule]).apply()


def serve(names: list[str]) -> None:
    """Execute the runs of the bonforge deployments on the server (those in ``names``, default all) until
    stopped. Each run is a subprocess of this one."""
    from prefect import serve as prefect_serve
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    url = _api_url()
    with get_client(sync_client=True) as client:
        found = client.read_deployments(flow_filter=FlowFilter(name=FlowFilterName(any_=[FLOW_NAME])))
    chosen = [d for d in found if not names or d.name in names]
    missing = sorted(set(names) - {d.name for d in found})
    if missing or not chosen:
        known = ", ".join(sorted(d.name for d in found)) or "none"
        what = f"no deployment named {', '.join(missing)}" if missing else "no bonforge deployment"
        raise ConfigError(f"{what} on {url} (deployed: {known}); register one with `bonforge deploy RECIPE --cron ...`")
    deployments = [
        _deployment(d.name, d.parameters, [{"schedule": s.schedule, "active": s.active} for s in d.schedules])
        for d in chosen
    ]
    prefect_serve(*deployments, pause_on_shutdown=False)
