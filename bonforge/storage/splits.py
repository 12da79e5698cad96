"""The validation split of a dataset version, by problem (``export.validation_fraction``).

A problem goes to validation when a hash of the recipe's seed and its id falls below the fraction: every row
of a problem (its prompts, its candidates) lands in the same split, the choice needs no other row (the
exports stream), and a problem keeps its split when a later build adds problems. The share of problems in
validation is the fraction on average, not exactly.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SPLITS = ("train", "validation")


@dataclass(frozen=True)
class Split:
    fraction: float
    seed: int

    def in_validation(self, problem_id: str) -> bool:
        digest = hashlib.sha256(f"{self.seed}/{problem_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") < self.fraction * 2**64

    def mask(self, table: pa.Table) -> pa.BooleanArray:
        """Which rows of ``table`` belong to validation (each distinct problem hashed once)."""
        ids = pc.dictionary_encode(problem_ids(table).combine_chunks())
        chosen = np.array([self.in_validation(p) for p in ids.dictionary.to_pylist()], dtype=bool)
        return pa.array(chosen[ids.indices.to_numpy(zero_copy_only=False)] if len(chosen) else np.zeros(0, bool))


def problem_ids(table: pa.Table) -> pa.ChunkedArray:
    """The problem of each row of an export table: its ``problem_id`` column, or ``extra_info.problem_id``
    (verl's layout)."""
    if "problem_id" in table.column_names:
        return table.column("problem_id")
    if "extra_info" in table.column_names and pa.types.is_struct(info := table.schema.field("extra_info").type):
        if info.get_field_index("problem_id") >= 0:
            return pc.struct_field(table.column("extra_info"), "problem_id")
    raise ValueError(f"an export table without problem ids (columns {table.column_names}) cannot be split")
