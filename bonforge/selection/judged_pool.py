"""The judged candidate pool, read in chunks of whole problems: each candidate with its verdict and its
problem's columns, of the kept problems only where the inputs hold ``problem_stats`` (genselect, fusion
pools, the RL export: the one place that join and the "kept" rule are written). One pass over every input
(``Inputs.aligned``): each text is read once and the pool is never whole in memory."""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from bonforge.stage import Inputs

SOURCES = {"candidates": "candidate_id", "verdicts": "candidate_id", "problems": "problem_id"}  # joined on


def chunks(i: Inputs, columns: dict[str, str], teachers: list[str] | None = None) -> Iterator[pa.Table]:
    """Tables of ``columns`` (output name -> the input it comes from: ``candidates``, ``verdicts`` or
    ``problems``, or ``input.column`` for a column of another name), in chunks of whole problems in problem_id
    order (not sorted within a chunk); only candidates with a verdict and a problem, of ``teachers`` when
    given (candidates first: a chunk ends where a batch of texts does)."""
    where = {out: (spec.partition(".")[0], spec.partition(".")[2] or out) for out, spec in columns.items()}
    read = {name: sorted({"problem_id", key} | {c for src, c in where.values() if src == name})
            for name, key in SOURCES.items() if name != "problems" or "problems" in dict(where.values())}
    if teachers is not None:
        read["candidates"] = sorted(set(read["candidates"]) | {"teacher"})
    if "problem_stats" in i:
        read["problem_stats"] = ["problem_id", "teacher", "keep"]
    with i.aligned(read) as stream:
        for chunk in stream:
            joined, chunk = _joined(chunk, where, teachers), None  # the chunk's inputs go before the next is read
            yield joined


def _joined(c: dict[str, pa.Table], where: dict[str, tuple[str, str]], teachers: list[str] | None) -> pa.Table:
    cand = c["candidates"]
    keep = None
    if "problem_stats" in c:
        s = c["problem_stats"]
        kept = s.filter(pc.and_(pc.equal(s.column("teacher"), "*"), s.column("keep"))).column("problem_id")
        keep = pc.is_in(cand.column("problem_id"), kept.combine_chunks())
    if teachers is not None:
        mine = pc.is_in(cand.column("teacher"), pa.array(teachers, pa.string()))
        keep = mine if keep is None else pc.and_(keep, mine)
    if keep is not None:
        cand = cand.filter(keep)
    rows = {name: pc.index_in(cand.column(SOURCES[name]), c[name].column(SOURCES[name]).combine_chunks())
            for name in ("verdicts", "problems") if name in c}  # each candidate's row there (null: none)
    found = None
    for r in rows.values():
        found = pc.is_valid(r) if found is None else pc.and_(found, pc.is_valid(r))
    if found is not None and not pc.all(found).as_py():
        cand = cand.filter(found)
        rows = {k: pc.filter(r, found) for k, r in rows.items()}
    return pa.table({out: cand.column(col) if src == "candidates" else c[src].column(col).take(rows[src])
                     for out, (src, col) in where.items()})


def rebatched(tables: Iterator[pa.Table], rows: int) -> Iterator[pa.Table]:
    """``tables`` again as tables of exactly ``rows`` rows (the last one fewer)."""
    held: list[pa.Table] = []
    n = 0
    for t in tables:
        held.append(t)
        n += t.num_rows
        while n >= rows:
            whole = pa.concat_tables(held)
            yield whole.slice(0, rows).combine_chunks()
            rest = whole.slice(rows)
            held, n = [rest], rest.num_rows
    if n:
        yield pa.concat_tables(held).combine_chunks()
