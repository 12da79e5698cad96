"""Re-judges, counted: a stage whose rows declare ``labels`` (``bonforge.stage.Rows``: the verdicts) gives each
row a ``base_id`` beside its ``row_id``, its identity without the judge's fingerprint and version. A row this
build computed whose ``base_id`` a committed output holds under another ``row_id`` is a verdict the judge
gave before it moved: a re-judge; it flipped where a label differs from the stored one.

Each shard's file records the rows it computed (``bonforge.row_bases``: row id, row key, base id and labels,
an Arrow stream in its footer, as the row index's piece is); at commit these are joined by DuckDB with the
row indexes of the stage's other outputs (newest first, each row against the newest that holds its base) and
the labels compared with the matched rows' in that output's files (no part file of this output is read
again): the manifest's ``rows_rejudged`` and ``rows_flipped``. Outputs written before their index had
``base_id`` are not looked at, and neither are the stored rows that are never reused (``Rows.volatile``: no
verdict on the content).
"""

from __future__ import annotations

import base64
import logging
from typing import Callable

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from bonforge.manifest import Manifest
from bonforge.stage import Node, Rows
from bonforge.storage.store import StageStore

log = logging.getLogger("bonforge")

BASES = b"bonforge.row_bases"
_UNREADABLE = (OSError, pa.ArrowException, ValueError, KeyError, duckdb.Error)


def encode(table: pa.Table) -> bytes:
    """A table as an Arrow stream (zstd) in base64 (Parquet metadata is text to some readers)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table)
    return base64.b64encode(sink.getvalue().to_pybytes())


def note(computed: pa.Table, written: pa.Table, rows: Rows) -> dict[bytes, bytes]:
    """The footer entry of a shard's computed rows (``computed``: their ids) with their labels in ``written``
    (the shard as written), where the stage counts re-judges."""
    if not rows.labels or "base_id" not in computed.column_names:
        return {}
    keys = rows.row_keys(computed)
    labels = written.select(list(rows.labels)).take(pc.index_in(keys, value_set=rows.row_keys(written)))
    return {BASES: encode(pa.table({"row_id": computed.column("row_id"), "row_key": keys,
                                    "base_id": computed.column("base_id"),
                                    **{c: labels.column(c) for c in rows.labels}}))}


def read(meta: dict[bytes, bytes]) -> pa.Table | None:
    """A shard footer's computed rows (``note``); None where it has none or it cannot be read."""
    try:
        return pa.ipc.open_stream(base64.b64decode(meta[BASES], validate=True)).read_all() if BASES in meta else None
    except _UNREADABLE:
        return None


def count(store: StageStore, node: Node, bases: list[pa.Table],
          committed: Callable[[StageStore, str], list[tuple[str, Manifest]]]) -> dict:
    """``rows_rejudged`` and ``rows_flipped`` of ``node``'s output (its shards written, not yet committed);
    ``bases``: the shards' computed rows with their labels (``read``); ``committed``: the stage's outputs,
    newest first."""
    rows = node.stage.rows
    if not rows or not rows.labels:
        return {}
    pending = pa.concat_tables(bases) if bases else None
    if pending is None or not pending.num_rows:
        return {"rows_rejudged": 0, "rows_flipped": 0}
    rejudged = flipped = 0
    stage = node.stage.name
    differs = " OR ".join(f'm."{c}" IS DISTINCT FROM o."{c}"' for c in rows.labels)
    for key, man in committed(store, stage):
        if key == node.key or not pending.num_rows:
            continue
        con = store.duckdb()
        try:
            index = store.read_file(store.loc.path("stages", stage, key, man.row_index))
            if "base_id" not in index.column_names:
                continue
            con.register("pending", pending)
            con.register("stored", index.select(["row_id", "row_key", "base_id"]))
            labels = ", ".join(f'p."{c}"' for c in rows.labels)
            # one stored row per content (the same text twice for a problem has one identity; any holds its label)
            pairs = con.sql(f"SELECT p.row_key AS new_key, s.row_key AS old_key, p.row_id = s.row_id AS same, {labels} "
                            "FROM pending p JOIN (SELECT base_id, any_value(row_id) AS row_id, any_value(row_key) AS "
                            "row_key FROM stored GROUP BY base_id) s USING (base_id)").to_arrow_table()
            if not pairs.num_rows:
                continue
            moved = pairs.filter(pc.invert(pairs.column("same")))
            con.register("moved", moved)
            con.read_parquet([str(p) for p in store.paths(stage, key)], union_by_name=True).create_view("o_all")
            column = f'"{rows.key}"'  # a stage with labels has a one-column row key (the verdicts: candidate_id)
            flipped += con.sql(f"SELECT count(*) FROM moved m JOIN o_all o ON o.{column} = m.old_key "
                               f"WHERE {differs}").fetchall()[0][0]
            rejudged += moved.num_rows
            pending = pending.filter(pc.invert(pc.is_in(pending.column("row_key"), value_set=pairs.column("new_key"))))
        except _UNREADABLE as e:
            log.warning("%s %s: its row index or files are unreadable (%s): its re-judges are not counted",
                        stage, key, e)
        finally:
            con.close()
    return {"rows_rejudged": rejudged, "rows_flipped": flipped}
