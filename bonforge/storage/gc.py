"""``bonforge gc``: remove the stage outputs that neither the newest runs nor any dataset version name.

Kept: every output a kept run recorded (the ``keep_runs`` newest runs, and every run still in progress: a
build whose process is gone has ended, as failed, ``bonforge.storage.liveness``) and every output in the
lineage of a dataset version (versions are never removed). Removed: the other
committed outputs, each by ``StageStore.uncommit`` (manifest first: from then on it does not exist for
readers nor for row reuse, which computes such rows again), the leftovers of a removal that was
interrupted (no manifest and no shard plan), and the records of the runs not kept. Uncommitted outputs
with a shard plan are an interrupted or running build's: gc leaves them for its rerun to resume.
"""

from __future__ import annotations

import json
import logging

from bonforge.storage.datasets import _manifest, _versions
from bonforge.storage.store import StageStore

log = logging.getLogger("bonforge")


def referenced(store: StageStore, keep_runs: int) -> tuple[set[tuple[str, str]], list[dict]]:
    """The (stage, key) pairs to keep, and the run records to remove."""
    runs = store.runs()
    kept = runs[len(runs) - keep_runs:] if keep_runs else []
    kept += [r for r in runs if r.status == "running" and r not in kept]
    keep = {(stage, key) for r in kept for stage, keys in r.stages.items() for key in keys}
    loc = store.loc
    for name in loc.names(loc.path("datasets")):
        for v in _versions(loc, name):
            man = _manifest(loc, name, v) or {}
            keep |= {(stage, key) for stage, keys in man.get("stages", {}).items() for key in keys}
    ids = {r.run_id for r in kept}
    return keep, [r for r in runs if r.run_id not in ids]


def collect(store: StageStore, keep_runs: int, dry_run: bool = False) -> dict:
    """Remove (or with ``dry_run`` only list) what no kept run nor dataset version needs."""
    keep, old_runs = referenced(store, keep_runs)
    loc, outputs, leftovers = store.loc, [], []
    for stage in sorted(loc.names(loc.path("stages"))):
        for key in sorted(loc.names(loc.path("stages", stage))):
            if (stage, key) in keep:
                continue
            if store.exists(stage, key):
                outputs.append({"stage": stage, "key": key, "rows": _rows(store, stage, key)})
            elif not loc.is_file(loc.path("stages", stage, key, "plan.json")):
                leftovers.append({"stage": stage, "key": key})
    if not dry_run:
        for item in outputs + leftovers:
            store.uncommit(item["stage"], item["key"])
        for r in old_runs:
            loc.remove(loc.path("runs", f"{r.run_id}.json"))
    log.info("gc: %s %d stage outputs, %d leftovers, %d run records", "would remove" if dry_run else "removed",
             len(outputs), len(leftovers), len(old_runs))
    return {"outputs": outputs, "leftovers": leftovers, "runs": [r.run_id for r in old_runs],
            "kept_outputs": len(keep), "dry_run": dry_run}


def _rows(store: StageStore, stage: str, key: str) -> int | None:
    try:
        return store.manifest(stage, key).rows
    except (OSError, ValueError, json.JSONDecodeError):
        return None
