"""The report's stages table shows, per stage, the rows this run computed and the rows it reused."""

from __future__ import annotations

import re

import pyarrow as pa

from bonforge.report import stages_table
from bonforge.storage.catalog import connect
from bonforge.storage.store import StageStore
from bonforge.storage.run_record import RunRecord


def test_the_stages_table_shows_rows_computed_and_reused(tmp_path):
    store = StageStore(tmp_path)
    table = pa.table({"candidate_id": [f"p{i}/t/0" for i in range(5)], "problem_id": [f"p{i}" for i in range(5)]})
    for stage, key, computed, reused in [("candidates", "grown", 2, 3), ("verdicts", "same", 5, 0)]:
        store.write_shard(stage, key, 0, table)
        store.commit(stage, key, 1, version="1", config={}, upstream={},
                     extra={"rows_computed": computed, "rows_reused": reused, "teacher": "qwen"})
    store.record_run(RunRecord.from_json({"run_id": "r", "recipe_name": "x", "status": "succeeded",
                      "stages": {"candidates": ["grown"], "verdicts": ["same"]}, "cached": {"verdicts": ["same"]}}))
    page = stages_table(connect(store, "r"))
    header, *rows = re.findall(r"<tr>(.*?)</tr>", page)
    assert re.findall(r"<th>(.*?)</th>", header)[:6] == ["stage", "teacher", "key", "rows", "computed", "reused"]
    cells = [re.findall(r"<td>(.*?)</td>", r) for r in rows]
    assert [c[:6] for c in cells] == [["candidates", "qwen", "grown", "5", "2", "3"],
                                      ["verdicts", "qwen", "same", "5", "0", "0"]]  # cached: none computed or reused


def test_the_strength_section_lists_measured_suites_weakest_first():
    import duckdb

    from bonforge.report import strength_section

    con = duckdb.connect()
    assert strength_section(con) == ""  # no problem_stats
    con.sql("CREATE TABLE problem_stats (problem_id VARCHAR, teacher VARCHAR, n_known_wrong INT, "
            "suite_strength DOUBLE)")
    con.sql("INSERT INTO problem_stats VALUES ('a', '*', 4, 1.0), ('b<', '*', 2, 0.5), ('b<', 'x', 2, 0.5), "
            "('c', '*', 0, NULL)")
    html = strength_section(con)
    assert "2 problems with known-wrong candidates; their tests reject 75.0% of them" in html
    assert html.index("b&lt;") < html.index("<td>a</td>")  # weakest first, escaped
    con.sql("UPDATE problem_stats SET suite_strength = NULL")
    assert strength_section(con) == ""
