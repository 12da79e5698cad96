"""Where a build's time went: one lane per resource, the intervals it was busy (seconds from the build's start)
and its busy share of the build's wall time, from the run record's busy intervals per stage (``RunRecord.busy``,
the union of each stage's shards computing, in a barrier build and a streaming one alike).

A stage's lane is the resource its compute holds: sampling the ``generator`` (a pool teacher's import, with no
teacher sampled, ``pool import``), verification the code ``sandbox`` or the maths ``checkers``, scoring the
``scorer``, pairwise evaluation the ``judge``, GenSelect selection the ``selector``; the rest is plain ``cpu``.
Stages on one lane count once where they overlap. The report draws it (``plots.busy_timeline``) and stores it
beside the HTML as ``timeline.json``: what the figure is drawn from, for a reader or a test."""

from __future__ import annotations

from datetime import datetime

from bonforge.storage.run_record import busy

ORDER = ("generator", "pool import", "sandbox", "checkers", "scorer", "judge", "selector", "cpu")
_HELD = {"scores": "scorer", "pairwise": "judge", "fusion_select": "selector", "selector_eval": "selector"}


def lane(stage: str, recipe: dict, domains: set[str]) -> str:
    """The resource lane of ``stage`` in a build of ``recipe`` (its JSON) over problems of ``domains``."""
    if stage == "candidates":
        sampled = any(t.get("engine") != "pool" for t in recipe.get("teachers") or []) or recipe.get("fusion")
        return "generator" if sampled else "pool import"
    if stage == "verdicts":
        return "sandbox" if domains == {"code"} else "checkers"
    return _HELD.get(stage, "cpu")


def timeline(run, domains: set[str]) -> dict:
    """The lanes of the build ``run`` (a ``RunRecord``) in ``ORDER``: each with its stages, its busy
    intervals ([begin, end] seconds from the build's start, disjoint, in order), its busy seconds and their
    share of the build's ``wall_s``. A run without busy intervals (an older record, a derived run) has none."""
    try:
        start = datetime.fromisoformat(run.started.replace("Z", "+00:00")).timestamp()
    except (AttributeError, ValueError):  # a record edited by hand: from its first busy interval
        start = min((a for spans in (run.busy or {}).values() for a, _ in spans), default=0.0)
    wall = run.wall_s or 0.0
    per: dict[str, dict] = {}
    for stage, spans in (run.busy or {}).items():
        entry = per.setdefault(lane(stage, run.recipe or {}, domains), {"stages": [], "spans": []})
        entry["stages"].append(stage)
        entry["spans"] += [(a - start, b - start) for a, b in spans]
    lanes = []
    for name in sorted(per, key=ORDER.index):
        intervals = busy(per[name]["spans"])
        secs = sum(b - a for a, b in intervals)
        lanes.append({"lane": name, "stages": sorted(per[name]["stages"]), "intervals": intervals,
                      "busy_s": round(secs, 3), "share": round(secs / wall, 4) if wall else 0.0})
    return {"run_id": run.run_id, "wall_s": wall, "lanes": lanes}
