"""The SQL box: one read-only SELECT over a run's catalog, stopped after a time limit, capped in rows.

The connection itself is locked down (``bonforge.viewer.catalog``); on top of that only a single statement
of type SELECT is accepted (``COPY ... TO`` a file inside the store would pass the directory check)."""

from __future__ import annotations

import threading

import duckdb
import pyarrow as pa

from bonforge.viewer.views import BadRequest

TIME_LIMIT_S = 10.0
ROW_CAP = 10_000


class QueryError(BadRequest):
    """The query was refused, failed, or ran past the limit; one line says which."""


def check(cur, text: str) -> str:
    """The one SELECT statement of ``text``, or QueryError."""
    if not text.strip():
        raise QueryError("the query is empty")
    try:
        statements = cur.extract_statements(text)
    except duckdb.Error as e:
        raise QueryError(_line(e)) from None
    if len(statements) != 1:
        raise QueryError(f"one SELECT statement only, not {len(statements)}")
    if statements[0].type != duckdb.StatementType.SELECT:
        raise QueryError(f"one SELECT statement only, not {statements[0].type.name}")
    return statements[0].query


def select(cur, text: str, time_limit_s: float = TIME_LIMIT_S, cap: int = ROW_CAP) -> tuple[pa.Table, bool]:
    """Run the query; returns (at most ``cap`` rows, whether there were more)."""
    query = check(cur, text)
    timer = threading.Timer(time_limit_s, cur.interrupt)
    timer.start()
    try:
        reader = cur.sql(query).to_arrow_reader(1024)
        batches, rows = [], 0
        for batch in reader:
            batches.append(batch)
            rows += batch.num_rows
            if rows > cap:
                break
        table = pa.Table.from_batches(batches, schema=reader.schema)
    except duckdb.InterruptException:
        raise QueryError(f"the query ran past the {time_limit_s:g} s limit and was stopped") from None
    except duckdb.Error as e:
        raise QueryError(_line(e)) from None
    finally:
        timer.cancel()
    return table.slice(0, cap), table.num_rows > cap


def _line(err: Exception) -> str:
    lines = [x for x in str(err).strip().splitlines() if x.strip()]
    return " ".join(lines[:2])[:500] if lines else type(err).__name__
