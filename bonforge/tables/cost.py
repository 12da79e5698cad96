"""The ``cost`` a stage's manifest records (docs/cost.md): what its rows cost and what this build spent.

``rows_usd`` is the cost of the output's rows, each as recorded when it was made (a row reused from an earlier
output carries its own cost); ``spent_usd`` is what this build paid: the rows it computed. ``unpriced_rows``
have no cost (no price was stated, or the endpoint reported no usable token counts).
"""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa
import pyarrow.compute as pc


def cost_summary(shards: Iterable[pa.Table], spent_usd: float, gpus: int | None = None) -> dict:
    """The ``cost`` of a stage output from its shards' ``cost_usd`` (and ``engine_s``, with ``gpus``: the GPUs
    its local engine held) columns."""
    rows_usd, priced, unpriced, engine_s = 0.0, 0, 0, 0.0
    for t in shards:
        cost = t.column("cost_usd")
        rows_usd += pc.sum(cost).as_py() or 0.0
        priced += t.num_rows - cost.null_count
        unpriced += cost.null_count
        if gpus is not None:
            engine_s += pc.sum(t.column("engine_s")).as_py() or 0.0
    out = {"rows_usd": round(rows_usd, 6) if priced else None, "spent_usd": round(spent_usd, 6),
           "priced_rows": priced, "unpriced_rows": unpriced}
    if gpus is not None:
        out.update(engine_s=round(engine_s, 3), gpus=gpus, gpu_s=round(engine_s * gpus, 3))
    return out



def add(into: dict, cost: dict, spent: bool | None) -> None:
    """Add a stage output's ``cost`` (``cost_summary``) to the totals ``into``; ``spent``: this build paid for
    the output (it was not found committed); None: no build's spending is counted."""
    into.setdefault("rows_usd", None)
    if cost.get("rows_usd") is not None:
        into["rows_usd"] = round((into["rows_usd"] or 0.0) + cost["rows_usd"], 6)
    if spent is not None:
        into["spent_usd"] = round(into.get("spent_usd", 0.0) + (cost.get("spent_usd", 0.0) if spent else 0.0), 6)
    into["unpriced_rows"] = into.get("unpriced_rows", 0) + cost.get("unpriced_rows", 0)
    if "gpu_s" in cost:
        into["gpu_s"] = round(into.get("gpu_s", 0.0) + cost["gpu_s"], 3)


def per_kept_row(cost: dict, kept: int) -> dict:
    """``cost`` (the build's, ``bonforge.report.cost``) with what one of the ``kept`` dataset rows cost: every
    row's cost, the dropped samples' too, over the kept rows; in all and per teacher and stage."""
    share = lambda part: round(part["rows_usd"] / kept, 6) if kept and part.get("rows_usd") is not None else None  # noqa: E731
    out = {**cost, "kept_rows": kept, "per_kept_row_usd": share(cost)}
    for group in ("teachers", "stages"):
        out[group] = {name: {**part, "per_kept_row_usd": share(part)} for name, part in cost.get(group, {}).items()}
    return out


def dataset_rows(files: dict) -> int:
    """The rows of a dataset version (its manifest's ``files``): those of one format, its splits together."""
    formats: dict[str, int] = {}
    for rel, entry in files.items():
        formats[rel.split("/", 1)[0]] = formats.get(rel.split("/", 1)[0], 0) + entry["rows"]
    return next(iter(formats.values()), 0)
