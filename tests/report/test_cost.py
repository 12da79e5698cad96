"""What a build cost, from a served teacher with stated prices whose token counts are known: each candidate's
cost_usd, the stage manifest's cost, the build summary's cost per teacher and per kept row, the dataset
manifest's, `bonforge runs`; a rebuild with more samples spends only on the new ones while its rows still cost
what they cost."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pytest
from crash_build import build
from llm_server import ScriptedServer, adder
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.report import write_report
from bonforge.report.cost import build_cost, cost_lines, cost_section
from bonforge.report.summary import summary_lines
from bonforge.storage.catalog import connect
from bonforge.storage.store import StageStore

PROBLEMS, N = 8, 8
IN, OUT = 3.0, 15.0  # dollars per million tokens


def recipe(tmp_path: Path, url: str, prices: bool = True) -> Path:
    (tmp_path / "problems.jsonl").write_text("".join(
        json.dumps({"question": f"What is {i} + {2 * i}?", "answer": str(3 * i)}) + "\n" for i in range(PROBLEMS)))
    priced = f", prices: {{input: {IN}, output: {OUT}}}" if prices else ""
    path = tmp_path / "recipe.yaml"
    path.write_text(f"""
name: priced
problems: {{name: toy, source: {{path: problems.jsonl}}}}
teachers:
  - {{name: a, engine: openai, model: m, base_url: "{url}", api_key_env: null, n: {N}, max_tokens: 64,
     max_retries: 0{priced}}}
export: {{name: toy-genselect}}
""")
    return path


def expected(candidates) -> list[float]:
    return [(p * IN + c * OUT) / 1e6 for p, c in zip(candidates.column("prompt_tokens").to_pylist(),
                                                      candidates.column("completion_tokens").to_pylist())]


def test_every_row_and_the_build_say_what_they_cost_and_a_rebuild_pays_only_for_new_rows(tmp_path):
    solver = adder("So the answer is \\boxed{{{value}}}.")
    store_path = tmp_path / "store"
    with ScriptedServer(solver) as server:
        path = recipe(tmp_path, server.url)
        first = build(store_path, path)
        asked = server.count
        second = build(store_path, path, f"teachers.0.n={N + 4}")
        assert server.count - asked == PROBLEMS * 4  # only the new samples were asked for
    store = StageStore(store_path)
    (key,) = first["stages"]["candidates"]
    table = store.read("candidates", key)
    assert table.column("cost_usd").to_pylist() == pytest.approx(expected(table))
    assert table.column("engine_s").null_count == table.num_rows  # a server: no engine time of ours
    rows_usd = sum(expected(table))
    assert store.manifest("candidates", key)["cost"] == {
        "rows_usd": pytest.approx(rows_usd), "spent_usd": pytest.approx(rows_usd), "priced_rows": PROBLEMS * N,
        "unpriced_rows": 0}

    cost = first["build_summary"]["cost"]
    dataset = json.loads((Path(first["dataset"]) / "manifest.json").read_text())
    kept = sum(f["rows"] for rel, f in dataset["files"].items() if rel.startswith("verl/"))
    assert kept > 0 and cost["kept_rows"] == kept
    assert cost["rows_usd"] == pytest.approx(rows_usd) and cost["spent_usd"] == pytest.approx(rows_usd)
    assert cost["per_kept_row_usd"] == pytest.approx(rows_usd / kept, rel=1e-4)
    assert cost["teachers"]["a"]["per_kept_row_usd"] == pytest.approx(rows_usd / kept, rel=1e-4)
    assert cost["stages"]["candidates"]["rows_usd"] == pytest.approx(rows_usd)
    assert dataset["summary"]["cost"]["per_kept_row_usd"] == pytest.approx(rows_usd / kept, rel=1e-4)
    assert "spent_usd" not in dataset["summary"]["cost"]  # a dataset states what its rows cost, not a build's spend
    con = connect(store, first["run_id"])  # per problem and teacher, beside the filter's decision
    [(total, kept_problems, unpriced)] = con.sql("SELECT sum(cost_usd), count(*) FILTER (WHERE kept), "
                                                 "sum(unpriced) FROM problem_cost").fetchall()
    assert total == pytest.approx(rows_usd) and unpriced == 0
    assert kept_problems == first["build_summary"]["kept"]
    page = Path(write_report(store, first["run_id"])).read_text()
    assert '<section id="cost"><h2>Cost over' in page and "teacher a" in page
    said = "\n".join(summary_lines(first["build_summary"]))
    assert f"per kept row ({kept} rows)" in said and "teacher a:" in said, said

    (key2,) = second["stages"]["candidates"]
    table2 = store.read("candidates", key2)
    new = pc.greater_equal(table2.column("sample_index"), N)
    spent2 = sum(expected(table2.filter(new)))
    cost2 = second["build_summary"]["cost"]
    assert cost2["spent_usd"] == pytest.approx(spent2) and spent2 < rows_usd  # the reused rows cost nothing now
    assert cost2["rows_usd"] == pytest.approx(sum(expected(table2)))  # ... and still cost what they cost

    wide = {"COLUMNS": "400"}
    said = CliRunner().invoke(app, ["runs", "--store", str(store_path)], env=wide)
    assert said.exit_code == 0 and "spent_usd" in said.output and "per_kept_row_usd" in said.output, said.output
    assert f"{round(cost2['spent_usd'], 6)}" in said.output, said.output
    said = CliRunner().invoke(app, ["runs", "--run", second["run_id"], "--store", str(store_path)], env=wide)
    assert said.exit_code == 0 and "spent_usd" in said.output, said.output


def test_without_prices_rows_have_no_cost_and_the_summary_says_nothing_of_dollars(tmp_path):
    with ScriptedServer(adder("So the answer is \\boxed{{{value}}}.")) as server:
        record = build(tmp_path / "store", recipe(tmp_path, server.url, prices=False))
    store = StageStore(tmp_path / "store")
    (key,) = record["stages"]["candidates"]
    assert store.read("candidates", key).column("cost_usd").null_count == PROBLEMS * N
    cost = record["build_summary"]["cost"]
    assert cost["rows_usd"] is None and cost["unpriced_rows"] == PROBLEMS * N and cost["spent_usd"] == 0
    assert not any(line.startswith("cost:") for line in summary_lines(record["build_summary"]))
    assert cost_section(cost) == ""


def test_a_store_from_before_costs_has_no_cost(tmp_path):
    assert build_cost(StageStore(tmp_path / "store"), {"candidates": ["0" * 20]}) is None
    line = cost_lines({"rows_usd": None, "spent_usd": 0.0, "unpriced_rows": 3, "teachers": {}})
    assert line == ["cost: unknown of rows; spent in this build $0.0000 (reused rows cost nothing now), 3 rows "
                    "without a price"]


def test_a_figure_that_leaves_rows_without_a_price_out_says_at_least():
    """Rows whose server reported no usable usage count nothing in the sums: the words gave $0.0100 per kept row
    for a teacher half of whose rows had no price, as if it were the cost. The control: every row priced."""
    def cost(unpriced: int) -> dict:
        part = {"rows_usd": 0.5, "spent_usd": 0.5, "unpriced_rows": unpriced, "per_kept_row_usd": 0.01}
        return {**part, "kept_rows": 50, "teachers": {"a": dict(part)}, "stages": {"candidates": dict(part)}}

    lines = cost_lines(cost(40))
    assert lines == ["cost: at least $0.5000 of rows, at least $0.0100 per kept row (50 rows); spent in this build "
                     "at least $0.5000 (reused rows cost nothing now), 40 rows without a price",
                     "  teacher a: at least $0.5000, at least $0.0100 per kept row, spent at least $0.5000, 40 rows "
                     "without a price"]
    assert cost_section(cost(40)).count("at least $0.0100") == 3  # in all, the teacher, the stage
    assert not any("at least" in line or "without a price" in line for line in cost_lines(cost(0)))
    assert "at least" not in cost_section(cost(0)) and "$0.0100" in cost_section(cost(0))
