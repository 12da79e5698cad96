"""The SQL box: one read-only SELECT over a run's catalog, stopped after a time limit, capped in rows and in
bytes.

The connection itself is locked down (``bonforge.viewer.catalog``, which also gives it a memory limit); on
top of that only a single statement of type SELECT is accepted (``COPY ... TO`` a file inside the store would
pass the directory check). The viewer runs ``select`` in a worker process whose memory the kernel bounds
(``bonforge.viewer.sql_worker``): the byte cap counts fetched rows, and DuckDB fills a whole vector first."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

import duckdb
import pyarrow as pa

from bonforge.viewer.views import BadRequest

TIME_LIMIT_S = 10.0
ROW_CAP = 10_000
MEMORY_BYTES = 2 << 30  # per open run's DuckDB connection (the viewer holds at most catalog.MAX_OPEN of them)
RESULT_BYTES = 64 << 20  # one query's result, as Arrow data, before it is paged or exported
BATCH_ROWS = 256  # rows fetched at a time: the byte cap is checked after each batch


@dataclass(frozen=True)
class Limits:
    """What one request's query may use; past any of them it is refused with one line (HTTP 400)."""

    time_s: float = TIME_LIMIT_S
    rows: int = ROW_CAP  # rows kept of a SQL box result (more are cut and flagged ``capped``)
    result_bytes: int = RESULT_BYTES
    memory_bytes: int = MEMORY_BYTES  # DuckDB's memory_limit of each run's connection


class QueryError(BadRequest):
    """The query was refused, failed, or ran past a limit; one line says which."""


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KIB|MIB|GIB|TIB)?\s*$", re.I)
_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str, what: str) -> int:
    """``512MB``, ``2GB``, ``1.5GiB``, ``1000000`` (bytes) as a number of bytes; BadRequest naming ``what``."""
    m = _SIZE.match(str(text))
    n = int(float(m.group(1)) * _UNITS[(m.group(2) or "B").upper()]) if m else 0
    if n <= 0:
        raise BadRequest(f"{what} must be a size such as 512MB or 2GB, not {text!r}")
    return n


def check(cur, text: str) -> str:
    """The one SELECT statement of ``text``, or QueryError."""
    if not text.strip():
        raise QueryError("the query is empty")
    try:
        statements = cur.extract_statements(text)
    except duckdb.Error as e:
        raise QueryError(line(e)) from None
    if len(statements) != 1:
        raise QueryError(f"one SELECT statement only, not {len(statements)}")
    if statements[0].type != duckdb.StatementType.SELECT:
        raise QueryError(f"one SELECT statement only, not {statements[0].type.name}")
    return statements[0].query


def select(cur, text: str, limits: Limits = Limits(), cap: int | None = None) -> tuple[pa.Table, bool]:
    """Run the query; returns (at most ``cap`` rows, default ``limits.rows``, and whether there were more).
    A result past ``limits.result_bytes`` or a query past DuckDB's memory limit is a QueryError."""
    cap = limits.rows if cap is None else cap
    query = check(cur, text)
    timer = threading.Timer(limits.time_s, cur.interrupt)
    timer.start()
    try:
        reader = cur.sql(query).to_arrow_reader(BATCH_ROWS)
        batches, rows, held = [], 0, 0
        for batch in reader:
            batches.append(batch)
            rows += batch.num_rows
            held += batch.nbytes
            if held > limits.result_bytes:
                raise QueryError(f"the result is larger than the {size(limits.result_bytes)} limit: select fewer "
                                 "rows or columns (`bonforge sql ... --format parquet -o FILE` has no such limit)")
            if rows > cap:
                break
        table = pa.Table.from_batches(batches, schema=reader.schema)
    except duckdb.InterruptException:
        raise QueryError(f"the query ran past the {limits.time_s:g} s limit and was stopped") from None
    except duckdb.OutOfMemoryException as e:
        raise QueryError(f"the query needs more than the viewer's memory limit ({size(limits.memory_bytes)}): "
                         f"{line(e)}") from None
    except (duckdb.Error, pa.ArrowException, OSError) as e:  # Arrow's: a value too large for its buffers
        raise QueryError(line(e)) from None
    finally:
        timer.cancel()
    return table.slice(0, cap), table.num_rows > cap


def size(n: int) -> str:
    """``n`` bytes for people: ``64 MiB``, ``2 GiB``, ``1.5 GiB``."""
    return f"{n / 2**30:.3g} GiB" if n >= 2**30 else f"{n / 2**20:.3g} MiB"


def line(err: Exception) -> str:
    """A DuckDB error as one line: its first two lines joined, at most 500 characters."""
    lines = [x for x in str(err).strip().splitlines() if x.strip()]
    return " ".join(lines[:2])[:500] if lines else type(err).__name__
