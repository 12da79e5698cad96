"""Sorting Arrow tables by key columns without paying for tables already in order (what most chunks, pools and
shards are). A leaf module: stages, the export and the engine's streams use it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def in_key_order(t: pa.Table, keys: list[str]) -> bool:
    """Whether the rows of ``t`` never decrease by ``keys`` (compared in turn; a null: not known to be)."""
    n = t.num_rows
    tied = np.ones(max(n - 1, 0), dtype=bool)  # rows equal to the next one on the keys so far
    for k in keys:
        if not tied.any():
            return True
        col = t.column(k)
        if col.null_count:
            return False
        before, after = col.slice(0, n - 1), col.slice(1)
        if (tied & pc.greater(before, after).to_numpy()).any():
            return False
        tied &= pc.equal(before, after).to_numpy()
    return True


def sort_by(t: pa.Table, keys: list[str]) -> pa.Table:
    """``t`` sorted by ``keys`` (ascending, stable, as ``Table.sort_by``); a table already in that order
    (what most chunks and shards are) is returned as it is, neither sorted nor copied."""
    return t if in_key_order(t, keys) else t.sort_by([(k, "ascending") for k in keys])
