"""TRL's conversational SFT rows of chosen answers (a Best-of-N pick, a fused answer): one user turn holding the
question, one assistant turn holding the answer, and the columns that say where the answer came from. A chosen
trajectory (a ``messages`` column) is its whole conversation instead, tool calls and tool messages included, in
the typed shape TRL's tool-calling SFT and verl's multi-turn dataset read (``trajectories.MESSAGES``)."""

from __future__ import annotations

import pyarrow as pa

from bonforge.tables import trajectories

MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))


def sft_messages(rows: pa.Table, beside: dict[str, pa.DataType]) -> pa.Table:
    """``rows`` (columns ``question``, ``text`` and those of ``beside``) as a ``messages`` column followed by the
    ``beside`` columns, cast to their types, in the order of ``rows``."""
    turns = [[{"role": "user", "content": q}, {"role": "assistant", "content": a}]
             for q, a in zip(rows.column("question").to_pylist(), rows.column("text").to_pylist())]
    shape = MESSAGES
    if "messages" in rows.column_names and rows.column("messages").null_count < rows.num_rows:
        shape = trajectories.MESSAGES
        turns = [trajectories.typed(acted) or pair for acted, pair in zip(rows.column("messages").to_pylist(), turns)]
    columns = {"messages": pa.array(turns, shape)}
    columns.update((name, rows.column(name).cast(kind)) for name, kind in beside.items())
    return pa.table(columns, schema=pa.schema([("messages", shape), *beside.items()]))
