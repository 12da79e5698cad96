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

