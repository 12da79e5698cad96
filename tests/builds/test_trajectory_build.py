"""Trajectories through a whole build: 1,000 imported tool-using trajectories over 250 maths problems are
verified by their final answers (not by what a tool printed), GenSelect prompts are built from them, and the RL
export's candidates carry every message of every trajectory back out, field for field."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bonforge.config import load_recipe
from bonforge.flows.build import build
from bonforge.storage import catalog
from bonforge.storage.store import StageStore

PROBLEMS = 250


def trajectory(k: int, j: int) -> list[dict]:
    """Problem ``k``'s ``j``-th trajectory: the tool prints the right answer (as an answer line) every time;
    final answers 0 and 1 are right, 2 and 3 wrong (3 quotes the tool's right answer line before its own)."""
    right, wrong = 2 * k, 2 * k + 1
    call = {"id": f"c{k}-{j}", "type": "function",
            "function": {"name": "python", "arguments": json.dumps({"code": f"print({k} * 2)"})}}
    final = {0: f"The tool says {right}.\nA: {right}", 1: f"A: {right}", 2: f"A: {wrong}",
             3: f"The tool printed A: {right} but I add one.\nA: {wrong}"}[j]
    extra = {"reasoning_content": f"thinking {j}"} if j % 2 else {}
    return [{"role": "user", "content": f"What is {k} doubled? (é)"},
            {"role": "assistant", "content": None if j else "Let me compute.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": f"A: {right}\n"},
            {"role": "assistant", "content": final, **extra}]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[dict, dict, Path]:
    root = tmp_path_factory.mktemp("trajectories")
    problems = [{"question": f"What is {k} doubled?", "answer": str(2 * k)} for k in range(PROBLEMS)]
    (root / "problems.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    pool = {(f"What is {k} doubled?", j): trajectory(k, j) for k in range(PROBLEMS) for j in range(4)}
    (root / "pool.jsonl").write_text("".join(json.dumps({"question": q, "messages": m}) + "\n"
                                             for (q, _), m in pool.items()))
    (root / "recipe.yaml").write_text("""
name: tools
problems: {name: tools, domain: math, source: {path: problems.jsonl}}
teachers: [{name: tir, engine: pool, source: {path: pool.jsonl}, format: messages}]
verify: {math: {patterns: ['(?m)^A:\\s*(.+?)\\s*$']}}
genselect: {min_candidates: 2, max_candidates: 4, prompts_per_problem: 1}
export: {name: tools-genselect, rl: {name: tools-rl}}
""")
    result = build(load_recipe(root / "recipe.yaml"), str(root / "store"), str(root))
    return result, pool, root / "store"


def test_every_message_of_every_trajectory_comes_back_out(built):
    result, pool, _ = built
    rows = pq.read_table(Path(result["rl_dataset"]) / "candidates" / "train.parquet").to_pylist()
    assert len(rows) == 4 * PROBLEMS  # every problem kept (pass rate 0.5)
    for row in rows:
        k, j = int(row["problem_id"].split("/")[1]), int(row["candidate_id"].rsplit("/", 1)[1])
        assert json.loads(row["messages"]) == pool[(f"What is {k} doubled?", j)]
        assert row["response"] == pool[(f"What is {k} doubled?", j)][-1]["content"]


def test_the_final_answer_is_judged_not_the_tools_output(built):
    """The tool printed the right answer in every trajectory (and trajectory 3 quotes it): only the
    trajectories whose own last line is right are correct."""
    result, _, _ = built
    rows = pq.read_table(Path(result["rl_dataset"]) / "candidates" / "train.parquet").to_pylist()
    got = {(int(r["candidate_id"].rsplit("/", 1)[1]), r["correct"]) for r in rows}
    assert got == {(0, True), (1, True), (2, False), (3, False)}


def test_genselect_prompts_show_the_final_answers(built):
    result, pool, _ = built
    rows = pq.read_table(Path(result["dataset"]) / "plain" / "train.parquet").to_pylist()
    assert len(rows) == PROBLEMS
    for row in rows:
        k = int(row["problem_id"].split("/")[1])
        prompt = row["prompt"]  # each trajectory in its compact form: its calls, their outputs, its answer
        assert f"```python\n{json.dumps(f'print({k} * 2)')[1:-1]}\n```\n\n```output\nA: {2 * k}\n\n```" in prompt
        assert f"A: {2 * k + 1}" in prompt and '"tool_calls"' not in prompt and "(é)" not in prompt


def test_sql_reads_trajectories_turn_by_turn_and_call_by_call(built):
    """The ``turns`` and ``tool_calls`` views of ``bonforge sql`` over the build's 1,000 trajectories."""
    _, pool, store = built
    con = catalog.connect(StageStore(store))
    assert con.sql("SELECT count(*) FROM turns").fetchall()[0][0] == sum(len(m) for m in pool.values())
    calls = con.sql("SELECT candidate_id, call_id, tool, code, output FROM tool_calls ORDER BY candidate_id").fetchall()
    assert len(calls) == 1000
    cid, call_id, tool, code, output = calls[0]
    k, j = int(cid.split("/")[1]), int(cid.rsplit("/", 1)[1])
    assert (call_id, tool, code, output) == (f"c{k}-{j}", "python", f"print({k} * 2)", f"A: {2 * k}\n")
    roles = con.sql("SELECT role, count(*) FROM turns GROUP BY role ORDER BY role").fetchall()
    assert roles == [("assistant", 2000), ("tool", 1000), ("user", 1000)]
