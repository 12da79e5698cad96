"""`recipes/math-tool.yaml` built as shipped, on a slice of MATH-500, with only its endpoint and slice set:

- against a scripted OpenAI-compatible server of our own that plays a model writing fenced ```python blocks (the
  server stops at the closing fence and continues the final message in place, as vLLM serve does). Its blocks
  run in the real Docker sandbox, and its answers read what the sandbox printed. Per problem its eight samples
  are: right through the tool; the tool prints the gold answer boxed but the final answer is wrong; the gold
  answer hidden in the block's code (the call's arguments) and no final answer; a block left open at the token
  limit (never run; its code ends in the gold, which a last-number rule would take for the answer); right
  without the tool; wrong through the tool (three). Verdicts come from the final answer
  only; the GenSelect prompts show the trajectories in their compact form; the Best-of-N dataset (the verifier's
  pick, `export.sft`) holds a correct trajectory per problem, whole, which TRL's SFTTrainer takes a step on and
  verl's multi-turn SFT dataset reads;
- with SmolLM2-135M in vLLM on CPU as the teacher (a real engine: generation pauses at the block, the block runs,
  the same sequence goes on). Its answers are mostly wrong, which is fine: the build verifies them and publishes
  its datasets."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from llm_server import ScriptedServer, continuing
from real_models import Kept
from sft_loads import trl_sft_step, verl_multiturn_rows
from tiny_lm import TOOLS_TEMPLATE, tiny_lm

from bonforge.config import load_recipe
from bonforge.flows.build import build
from bonforge.judging.math import check_answer
from bonforge.llm.fenced import FENCE, inline
from bonforge.sandbox import tool_calls
from bonforge.schema import MATH_STATUSES
from bonforge.storage import catalog
from bonforge.storage.store import StageStore
from bonforge.tables import trajectories

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
RECIPE = RECIPES / "math-tool.yaml"
PROBLEMS = 4
pytestmark = [pytest.mark.slow, pytest.mark.docker]
WRONG = "42000126"  # what the wrong samples' block prints (7 * 6 * 1000003)


def output_of(so_far: str) -> str | None:
    found = re.search(r"```output\n(.*?)```\n$", so_far, re.S)
    return found and found[1].strip()


def cut_block(gold: str) -> str:
    """A text cut at the token limit inside a block that never ran, whose code ends in the gold when it is a
    number (MATH-500's fourth problem: 9)."""
    loop = f"for k in range({gold}):" if gold.isdigit() else "while True:"
    return f"I will check with code.\n```python\n{loop}\n"


def tir(golds: dict[str, str]):
    """The scripted model: sample kind ``seed % 8`` (the eight seeds of a problem's samples are consecutive)."""

    def model(body: dict, so_far: str):
        prompt = body["messages"][0]["content"]
        gold = next(g for q, g in golds.items() if q in prompt)
        kind, out = body["seed"] % 8, output_of(so_far)
        block = {0: f"answer = r'''{gold}'''\nprint(answer)\n", 1: f"print(r'''\\boxed{{{gold}}}''')\n",
                 2: f"# the answer is \\boxed{{{gold}}}\nprint(2 + 2)\n"}.get(kind, "print(7 * 6 * 1000003)\n")
        if kind == 3:
            return cut_block(gold), "length"
        if kind == 4:
            return f"Without the tool: $\\boxed{{{gold}}}$."
        if out is None:  # what follows the fence is the model's own guess: the server stops at the fence
            return f"Let me compute it.\n```python\n{block}```\n```output\n{gold}\n```\n$\\boxed{{{gold}}}$"
        final = {1: "The program printed a boxed answer, but mine is $\\boxed{123456789}$.",
                 2: "I could not finish."}.get(kind, f"So the answer is $\\boxed{{{out}}}$.")
        return so_far + final

    return model


def rows(dataset: str, part: str) -> list[dict]:
    return pq.read_table(Path(dataset) / part / "train.parquet").to_pylist()


@pytest.fixture(scope="module")
def scripted(tmp_path_factory, data_dir, sandbox_image, shared_prefect):
    records = [json.loads(line) for line in (data_dir / "math" / "math500.jsonl").open()][:PROBLEMS]
    golds = {r["problem"]: r["answer"] for r in records}
    runs: list = []
    real = tool_calls.PythonCalls.__call__

    def counted(self, calls):
        runs.extend(calls)
        return real(self, calls)

    with pytest.MonkeyPatch.context() as mp, ScriptedServer(continuing(tir(golds))) as server:
        mp.setattr(tool_calls.PythonCalls, "__call__", counted)
        recipe = load_recipe(RECIPE, [f"teachers.tir.base_url={server.url}", f"problems.limit={PROBLEMS}"])
        store = tmp_path_factory.mktemp("math-tool") / "store"
        result = build(recipe, str(store), str(RECIPES))
    return result, golds, server.bodies, runs, judged(store)


def judged(store: Path) -> list[dict]:
    """Every candidate of the store with its verdict and its problem's gold answer."""
    con = catalog.connect(StageStore(store))
    return con.sql("SELECT c.*, v.correct, v.status, p.answer AS gold FROM candidates c JOIN verdicts v "
                   "USING (candidate_id) JOIN problems p ON p.problem_id = c.problem_id").to_arrow_table().to_pylist()


def kind(row: dict) -> int:
    return row["seed"] % 8


def test_trajectories_run_in_the_sandbox_and_are_judged_by_their_final_answers(scripted):
    _, _, bodies, runs, pool = scripted
    assert len(pool) == PROBLEMS * 8 and {kind(r) for r in pool} == set(range(8))
    for row in pool:
        messages, k, gold = json.loads(row["messages"]), kind(row), row["gold"]
        facts = trajectories.check(messages)
        assert row["correct"] == (k in (0, 4)), (k, row["status"], row["text"])
        assert row["text"] == messages[-1]["content"]  # the final answer is what was judged
        if k in (3, 4):  # no block run: one turn (3: cut inside an open block, never run)
            assert facts.calls == 0 and len(messages) == 2
        else:  # one block, run in the sandbox: what Python printed, not what the model guessed
            assert facts.calls == 1 and [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
            assert messages[1]["content"].endswith(FENCE) and "```output" not in messages[1]["content"]
            printed = {0: gold, 1: f"\\boxed{{{gold}}}", 2: "4"}.get(k, WRONG)
            assert messages[2]["content"] == printed + "\n"
    status = {(kind(r), r["status"], r["finish_reason"]) for r in pool if kind(r) in (1, 2, 3)}
    assert status == {(1, "wrong_answer", "stop"), (2, "no_answer", "stop"), (3, "no_answer", "length")}
    # the block cut inside its loop: the last number of its code is the gold; the maths judge reads no answer in a
    # block the text ends inside (it took that 9 for the answer before), with the default settings too
    (cut,) = [r for r in pool if kind(r) == 3 and r["gold"] == "9"]
    assert cut["text"] == cut_block("9") and check_answer(cut["text"], "9").status == "no_answer"
    assert len(runs) == PROBLEMS * 6 and all(len(cells) == 1 for cells in runs)
    assert len(bodies) == PROBLEMS * (6 * 2 + 2)  # a block: two requests (the second continues); else one
    later = [b for b in bodies if b.get("continue_final_message")]
    assert len(later) == PROBLEMS * 6 and all(FENCE in b["stop"] for b in bodies if b not in later)


def test_genselect_prompts_show_trajectories_in_their_compact_form(scripted):
    result, _, _, _, judged_rows = scripted
    pool = {r["candidate_id"]: r for r in judged_rows}
    prompts = rows(result["dataset"], "plain")
    kept = {r["extra_info"]["problem_id"] for r in rows(result["rl_dataset"], "rl")}
    assert {r["problem_id"] for r in prompts} == kept and len(kept) == PROBLEMS  # 2 of 8 right: every one kept
    assert len(prompts) == PROBLEMS * 4
    for row in prompts:
        shown = [pool[c] for c in row["candidate_ids"]]
        assert row["correct_indices"] == [i for i, c in enumerate(shown) if c["correct"]] != []
        for c in shown:  # its calls as python blocks, their outputs as output blocks, then its final answer
            assert trajectories.compact(c["messages"]) in row["prompt"]
        assert '"tool_calls"' not in row["prompt"] and "Solve the following" not in row["prompt"]  # no prompt
    assert any("```output\n" in r["prompt"] for r in prompts)


def test_the_best_of_n_dataset_holds_a_correct_trajectory_per_problem_whole(scripted):
    result, _, _, _, judged_rows = scripted
    pool = {r["candidate_id"]: r for r in judged_rows}
    picks = rows(result["sft_dataset"], "trl")
    assert len(picks) == PROBLEMS
    for pick in picks:
        stored = pool[pick["candidate_id"]]
        first = min(c for c, r in pool.items() if r["problem_id"] == pick["problem_id"] and r["correct"])
        assert stored["correct"] and pick["candidate_id"] == first
        assert pick["messages"] == trajectories.typed(stored["messages"])  # every turn, the tool's output too
    manifest = json.loads((Path(result["sft_dataset"]) / "manifest.json").read_text())
    assert manifest["trainers"]["trl"]["trainer"] == "SFTTrainer" and "verl" in manifest["trainers"]


@pytest.fixture(scope="module")
def tool_lm(scripted, tmp_path_factory) -> str:
    corpus = [json.dumps(r["messages"]) for r in rows(scripted[0]["sft_dataset"], "trl")]
    return tiny_lm(tmp_path_factory.mktemp("tool-lm"), corpus, chat_template=TOOLS_TEMPLATE)


def test_trl_sft_takes_a_step_and_verl_reads_the_best_of_n_trajectories(scripted, tool_lm, verl_python, tmp_path):
    path = Path(scripted[0]["sft_dataset"]) / "trl" / "train.parquet"
    trl_sft_step(path, tool_lm, tmp_path)
    read = verl_multiturn_rows(verl_python, tool_lm, path, tmp_path)
    assert len(read) == PROBLEMS and all(0 < r["trained"] < r["tokens"] for r in read)


# -- the real engine ----------------------------------------------------------------------------------------
# Two MATH-500 problems, four samples of at most 192 tokens each (a trajectory's budget: tool outputs not
# counted). SmolLM2 writes a ```python block in most samples, and closes one within the budget in about one in
# three (7 of 24 over the first six problems at this temperature); of these eight, two ran a block (measured).
REAL = ["problems.limit=2", "teachers.tir.n=4", "teachers.tir.max_tokens=192"]


def test_smollm2_on_cpu_vllm_pauses_at_its_block_runs_it_and_goes_on(smol_vllm, sandbox_image, tmp_path,
                                                                        shared_prefect, data_dir, monkeypatch):
    import bonforge.llm

    recipe = load_recipe(RECIPE, REAL)
    (teacher,) = recipe.teachers
    kept, make = Kept(smol_vllm), bonforge.llm.make_engine
    monkeypatch.setattr(bonforge.llm, "make_engine", lambda t: kept if t == teacher else make(t))
    result = build(recipe, str(tmp_path / "store"), str(RECIPES))
    pool = judged(tmp_path / "store")
    assert len(pool) == 2 * 4 and all(r["status"] in MATH_STATUSES for r in pool)
    ran = [json.loads(r["messages"]) for r in pool if trajectories.check(json.loads(r["messages"])).calls]
    assert ran, [r["text"][-200:] for r in pool]
    went_on = [r for r in kept.requests if r.continue_final]
    for messages in ran:  # paused at its closing fence, the block ran, the same sequence went on after its output
        assert messages[1]["content"].endswith(FENCE) and messages[2]["role"] == "tool"
        assert any(r.messages[-1] == {"role": "assistant", "content": inline(messages[1:3])} for r in went_on)
    assert all(FENCE in r.stop for r in kept.requests if not r.continue_final)
    for dataset in ("dataset", "rl_dataset", "sft_dataset"):
        assert (Path(result[dataset]) / "manifest.json").is_file()
    print(f"{len(ran)} of {len(pool)} trajectories ran a block;",
          {s: sum(r["status"] == s for r in pool) for s in MATH_STATUSES}, "outputs:",
          [m[2]["content"][:80] for m in ran])
