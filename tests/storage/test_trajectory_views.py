"""The trajectory views over hostile (but checked) trajectories: a call id that comes again in a later turn
finds the tool message of its own turn only, and the honest trajectory beside it reads as before."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from bonforge.storage.catalog import TRAJECTORY_VIEWS
from bonforge.tables import trajectories as tj


def call(cid: str, code: str) -> dict:
    return {"id": cid, "type": "function", "function": {"name": "python", "arguments": f'{{"code": "{code}"}}'}}


def asks(cid: str, code: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [call(cid, code)]}


def told(cid: str, out: str) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": out}


USER, ANSWER = {"role": "user", "content": "q"}, {"role": "assistant", "content": "A: 2"}


def views(trajectories: list[list[dict]]) -> duckdb.DuckDBPyConnection:
    for t in trajectories:
        tj.check(t)
    n = len(trajectories)
    con = duckdb.connect()
    con.register("candidates", pa.table({"candidate_id": [f"c{i}" for i in range(n)], "problem_id": ["p"] * n,
                                         "teacher": ["t"] * n, "messages": [tj.dumps(t) for t in trajectories]}))
    con.execute(TRAJECTORY_VIEWS)
    return con


def test_a_call_id_used_again_in_a_later_turn_gets_its_own_turns_output_only():
    again = [USER, asks("call_0", "print(1)"), told("call_0", "first"), asks("call_0", "print(2)"),
             told("call_0", "second"), ANSWER]
    honest = [USER, asks("a", "print(1)"), told("a", "1"), asks("b", "print(2)"), told("b", "2"), ANSWER]
    rows = views([again, honest]).sql("SELECT candidate_id, position, code, output FROM tool_calls "
                                      "ORDER BY candidate_id, position").fetchall()
    assert rows == [("c0", 1, "print(1)", "first"), ("c0", 3, "print(2)", "second"),
                    ("c1", 1, "print(1)", "1"), ("c1", 3, "print(2)", "2")]
