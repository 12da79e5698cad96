"""TRL's conversational SFT rows of chosen answers (a Best-of-N pick, a fused answer): one user turn holding the
question, one assistant turn holding the answer, and the columns that say where the answer came from."""

from __future__ import annotations

import pyarrow as pa

MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))


def sft_messages(rows: pa.Table, beside: dict[str, pa.DataType]) -> pa.Table:
    """``rows`` (columns ``question``, ``text`` and those of ``beside``) as a ``messages`` column followed by the
    ``beside`` columns, cast to their types, in the order of ``rows``."""
    turns = [[{"role": "user", "content": q}, {"role": "assistant", "content": a}]
             for q, a in zip(rows.column("question").to_pylist(), rows.column("text").to_pylist())]
    columns = {"messages": pa.array(turns, MESSAGES)}
    columns.update((name, rows.column(name).cast(kind)) for name, kind in beside.items())
    return pa.table(columns, schema=pa.schema([("messages", MESSAGES), *beside.items()]))
