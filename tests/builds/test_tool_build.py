"""A tool-integrated maths build end to end: an OpenAI-compatible server of our own that answers with chat tool
calls, the calls run in the real sandbox, trajectories stored whole and verified by their final answers,
GenSelect, the RL export and the SFT export built from them (TRL's SFTTrainer takes a step on it, verl's
multi-turn SFT dataset reads it, each through a chat template that writes tool calls); a rerun with one more
trajectory per problem asks only for that one, and the stored trajectories' tool outputs come from the store
(never run again)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from llm_server import ScriptedServer
from sft_loads import trl_sft_step, verl_multiturn_rows
from tiny_lm import TOOLS_TEMPLATE, tiny_lm

from bonforge.config import load_recipe
from bonforge.flows.build import build
from bonforge.sandbox import tool_calls
from bonforge.tables import trajectories

PROBLEMS = 6
REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.docker]


def tir(n: int, body: dict):
    """Even seeds compute with the tool (and answer what it printed), odd seeds answer off by one at once."""
    messages = body["messages"]
    a, b = map(int, re.search(r"What is (\d+) \+ (\d+)\?", messages[0]["content"]).groups())
    usage = {"prompt_tokens": 20, "completion_tokens": 5}
    if messages[-1]["role"] == "tool":
        message = {"role": "assistant", "content": f"The tool says so.\nA: {messages[-1]['content'].strip()}"}
    elif body["seed"] % 2 == 0 and "tools" in body:
        code = json.dumps({"code": f"x = {a} + {b}\nprint(x)"})
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "srv", "type": "function", "function": {"name": "python", "arguments": code}}]}
    else:
        message = {"role": "assistant", "content": f"A: {a + b + 1}"}
    return 200, {}, {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage}


def recipe_text(url: str, n: int) -> str:
    return f"""
name: tools
problems: {{name: toy, source: {{path: problems.jsonl}}}}
teachers:
  - {{name: tir, engine: openai, model: m, base_url: "{url}", api_key_env: null, n: {n}, max_tokens: 64,
     python_tool: {{max_calls: 2}}}}
verify: {{math: {{patterns: ['(?m)^A:\\s*(.+?)\\s*$']}}, code: {{pool_size: 2}}}}
filter: {{min_pass_rate: 0.0, max_pass_rate: 1.0}}
export: {{name: tools-genselect, rl: {{name: tools-rl}}, sft: {{name: tools-sft}}}}
"""


def candidates(result: dict) -> list[dict]:
    return pq.read_table(Path(result["rl_dataset"]) / "candidates" / "train.parquet").to_pylist()


@pytest.fixture(scope="module")
def builds(tmp_path_factory, sandbox_image):
    root = tmp_path_factory.mktemp("tools")
    (root / "problems.jsonl").write_text("".join(
        json.dumps({"question": f"What is {i} + {3 * i}?", "answer": str(4 * i)}) + "\n" for i in range(1, 7)))
    runs = []
    real = tool_calls.PythonCalls.__call__

    def counted(self, calls):
        runs.extend(calls)
        return real(self, calls)

    with pytest.MonkeyPatch.context() as mp, ScriptedServer(tir) as server:
        mp.setattr(tool_calls.PythonCalls, "__call__", counted)
        out = []
        for n in (2, 3):
            (root / "recipe.yaml").write_text(recipe_text(server.url, n).replace("pool_size: 2", "pool_size: 2, "
                                                                                 f"image: {sandbox_image}"))
            before = (len(server.bodies), len(runs))
            out.append((build(load_recipe(root / "recipe.yaml"), str(root / "store"), str(root)),
                        [b for b in server.bodies[before[0]:]], runs[before[1]:]))
    return out


def test_trajectories_are_sampled_run_and_judged_by_their_answers(builds):
    result, bodies, runs = builds[0]
    rows = candidates(result)
    assert len(rows) == PROBLEMS * 2
    for row in rows:
        messages = json.loads(row["messages"])
        facts = trajectories.check(messages)
        seed_even = row["correct"]
        if seed_even:  # the tool computed the sum; the answer read it
            assert facts.calls == 1 and messages[2] == {"role": "tool", "tool_call_id": "call_0",
                                                        "content": messages[2]["content"]}
            assert messages[1]["tool_calls"][0]["id"] == "call_0"  # ours, not the server's "srv"
            assert row["response"].endswith(messages[2]["content"].strip())
        else:
            assert facts.calls == 0 and len(messages) == 2
    assert sum(r["correct"] for r in rows) == PROBLEMS  # one tool trajectory per problem (seeds alternate)
    assert len(runs) == PROBLEMS and all(len(cells) == 1 for cells in runs)
    assert len(bodies) == PROBLEMS * 3  # tool trajectories take two turns, direct answers one
    assert all(b["tools"][0]["function"]["name"] == "python" for b in bodies if b["messages"][-1]["role"] == "user")


def test_one_more_trajectory_asks_only_for_it_and_runs_no_stored_call_again(builds):
    (first, _, _), (second, bodies, runs) = builds
    asked = {re.search(r"What is \d+ \+ \d+\?", b["messages"][0]["content"])[0] for b in bodies}
    assert asked == {f"What is {i} + {3 * i}?" for i in range(1, 7)}  # every problem, for its new sample
    new = {(r["candidate_id"]) for r in candidates(second)} - {r["candidate_id"] for r in candidates(first)}
    assert new == {f"toy/{i:05d}/tir/2" for i in range(PROBLEMS)}
    turns = sum(1 for b in bodies)
    tools_used = sum(1 for b in bodies if b["messages"][-1]["role"] == "tool")
    assert turns == PROBLEMS + tools_used and len(runs) == tools_used  # sample 2 only; no old call re-run
    old = {r["candidate_id"]: r["messages"] for r in candidates(first)}
    assert all(r["messages"] == old[r["candidate_id"]] for r in candidates(second) if r["candidate_id"] in old)


def sft_rows(result: dict) -> list[dict]:
    return pq.read_table(Path(result["sft_dataset"]) / "trl" / "train.parquet").to_pylist()


def test_the_sft_export_holds_one_correct_trajectory_per_problem_whole(builds):
    result = builds[0][0]
    rows = sft_rows(result)
    assert len(rows) == PROBLEMS and [r["problem_id"] for r in rows] == sorted(r["problem_id"] for r in rows)
    pool = candidates(result)
    for row in rows:
        stored = next(c for c in pool if c["candidate_id"] == row["candidate_id"])
        first = min(c["candidate_id"] for c in pool if c["problem_id"] == row["problem_id"] and c["correct"])
        assert stored["correct"] and row["candidate_id"] == first
        assert [m["role"] for m in row["messages"]] == ["user", "assistant", "tool", "assistant"]
        assert row["messages"] == trajectories.typed(stored["messages"])
    manifest = json.loads((Path(result["sft_dataset"]) / "manifest.json").read_text())
    assert manifest["trainers"]["trl"]["trainer"] == "SFTTrainer" and "verl" in manifest["trainers"]


@pytest.fixture(scope="module")
def tool_lm(builds, tmp_path_factory) -> str:
    corpus = [json.dumps(r["messages"]) for r in sft_rows(builds[0][0])]
    return tiny_lm(tmp_path_factory.mktemp("tool-lm"), corpus, chat_template=TOOLS_TEMPLATE)


def test_trl_sft_takes_a_step_on_trajectories(builds, tool_lm, tmp_path):
    path = Path(builds[0][0]["sft_dataset"]) / "trl" / "train.parquet"
    assert pq.read_table(path).to_pylist()[0]["messages"][1]["tool_calls"][0]["function"]["name"] == "python"
    text = trl_sft_step(path, tool_lm, tmp_path)
    assert "<tool_call>python" in text and '"code"' in text  # the calls reach the tokens trained on


def test_verls_multi_turn_sft_dataset_reads_the_trajectories(builds, tool_lm, verl_python, tmp_path):
    rows = verl_multiturn_rows(verl_python, tool_lm, Path(builds[0][0]["sft_dataset"]) / "trl" / "train.parquet",
                               tmp_path)
    assert len(rows) == PROBLEMS
    for row in rows:
        assert row["roles"] == ["user", "assistant", "tool", "assistant"]
        assert 0 < row["trained"] < row["tokens"]  # the model's turns are trained on, the user and tool turns not


def test_verls_rollout_gets_the_same_tool_from_the_rl_manifest(builds, verl_python, sandbox_image, tmp_path):
    """The RL export names the tool (verl's tool config); verl's registry builds it and its sessions behave as
    the sampler's: state kept within a trajectory, none across, a runaway call stopped with its status."""
    import yaml

    manifest = json.loads((Path(builds[0][0]["rl_dataset"]) / "manifest.json").read_text())
    verl = manifest["trainers"]["verl"]
    assert verl["multi_turn_overrides"] == ["actor_rollout_ref.rollout.multi_turn.enable=true"]
    config = verl["tool_config"]
    assert config["tools"][0]["config"]["sandbox"]["image"] == sandbox_image
    (tmp_path / "tools.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([verl_python, str(REPO / "tests" / "helpers" / "verl_tool_payload.py"),
                           str(tmp_path / "tools.yaml")], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["name"] == "python"
    (set_, s1), (other, s2), (read, s3), (loop, s4), (bad, s5) = out["calls"]
    assert (set_, s1, read, s3) == ("set\n", "ok", "42\n", "ok")  # the session keeps its state
    assert s2 == "runtime_error" and "NameError" in other  # another trajectory's session has none of it
    assert s4 == "timeout" and loop.startswith("[timeout]")
    assert bad.startswith("error: the arguments") and s5 is None
