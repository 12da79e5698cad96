"""The tool loop against a scripted engine whose replies are hostile: every stored trajectory is one a trainer
can replay (ids of ours, one tool message per call, an answer last), a call that cannot run gets a tool message
saying why and runs nothing, the call budget holds and the turn after it is asked without tools, and each
sample keeps its own seed on every turn."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from bonforge.config import load_recipe
from bonforge.errors import ConfigError
from bonforge.llm.base import Completion, Request
from bonforge.llm.config import PythonTool
from bonforge.llm.tools import SCHEMA, sample_with_tools
from bonforge.tables import trajectories


def call(code=None, name="python", arguments=None, cid="x") -> dict:
    args = json.dumps({"code": code}) if arguments is None else arguments
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


@dataclass(frozen=True)
class Run:
    status: str
    stdout: str
    stderr: str = ""
    cpu_s: float = 0.0


class Scripted:
    """An engine answering each ask by ``reply(ask, turn)`` -> (text, calls) or None (prompt skipped)."""

    name = "scripted"

    def __init__(self, reply):
        self.reply, self.asks = reply, []

    def generate(self, requests, progress=None):
        self.asks += requests
        out = []
        for r in requests:
            got = self.reply(r, sum(m["role"] == "assistant" for m in r.messages))
            out.append([] if got is None else [Completion(
                r.id, 0, got[0], None, "stop", 10, 5, r.seed, "scripted", "m", tool_calls=got[1])])
        return out


def ran(cells_log):
    def run(calls):
        cells_log.append(calls)
        return [Run("ok", f"ran {len(cells)} cells: {cells[-1]}\n") for cells in calls]
    return run


REQ = Request(id="p1", messages=({"role": "user", "content": "Add 2 and 3."},), n=2, seed=100, max_tokens=50)


def test_a_trajectory_calls_reads_and_answers_with_its_own_seed_on_every_turn():
    def reply(r, turn):
        return ("Let me run it.", (call("x = 2 + 3"),)) if turn == 0 else \
            ("Again.", (call("print(x)"),)) if turn == 1 else ("A: 5", None)

    engine, log = Scripted(reply), []
    out = sample_with_tools(engine, [REQ], ran(log), PythonTool(max_calls=4))
    assert [len(c) for c in out] == [2]
    first = out[0][0]
    messages = json.loads(first.messages)
    assert trajectories.check(messages) == trajectories.Facts(turns=3, calls=2, tool_messages=2)
    assert first.text == "A: 5" and first.seed == 100 and out[0][1].seed == 101
    assert first.prompt_tokens == 30 and first.completion_tokens == 15  # every turn's tokens
    assert [m.get("tool_call_id") for m in messages if m["role"] == "tool"] == ["call_0", "call_1"]
    assert messages[4]["content"] == "ran 2 cells: print(x)\n"  # the session: the earlier cell ran first
    assert log[1][0] == ["x = 2 + 3", "print(x)"]
    assert {a.seed for a in engine.asks if a.id == "p1#0"} == {100} and all(a.n == 1 for a in engine.asks)
    assert all(a.tools == (SCHEMA,) for a in engine.asks)


def test_hostile_calls_get_a_tool_message_and_run_nothing():
    bad = (call(name="shell", code="rm -rf /"), call(arguments="not json"), call(arguments='{"code": 7}'),
           call(arguments='{"code": "print(1)"}', cid="dup"), call(code="print(2)", cid="dup"), "not a call")

    def reply(r, turn):
        return ("", bad) if turn == 0 else ("A: 1", None)

    log = []
    out = sample_with_tools(Scripted(reply), [REQ], ran(log), PythonTool(max_calls=8))
    messages = json.loads(out[0][0].messages)
    tools = [m["content"] for m in messages if m["role"] == "tool"]
    assert tools[0].startswith("error: no tool named 'shell'")
    assert tools[1].startswith("error: the arguments") and tools[2].startswith("error: the arguments")
    assert tools[3] == "ran 1 cells: print(1)\n" and tools[4] == "ran 2 cells: print(2)\n"
    assert tools[5].startswith("error: no tool named")
    assert [m["id"] for m in messages[1]["tool_calls"]] == [f"call_{k}" for k in range(6)]  # ids of ours
    assert [c[-1] for c in log[0]] == ["print(1)", "print(2)", "print(1)", "print(2)"]  # the two samples
    trajectories.check(messages)


def test_the_call_budget_holds_and_the_last_turn_is_asked_without_tools():
    def reply(r, turn):  # a model that never stops calling, three calls a turn
        return ("more", (call("1"), call("2"), call("3")))

    engine, log = Scripted(reply), []
    out = sample_with_tools(engine, [REQ], ran(log), PythonTool(max_calls=4))
    messages = json.loads(out[0][0].messages)
    assert sum(len(m.get("tool_calls") or []) for m in messages) == 4  # 3, then 1 of the next three
    assert messages[-1] == {"role": "assistant", "content": "more"}  # its calls on the toolless turn ignored
    asks = [a for a in engine.asks if a.id == "p1#0"]
    assert [a.tools is None for a in asks] == [False, False, True]


def test_a_prompt_the_engine_skips_skips_the_request_and_a_late_skip_ends_the_trajectory():
    def reply(r, turn):
        if "skip me" in r.messages[0]["content"]:
            return None
        return None if turn == 1 and r.id == "p2#1" else ("Run.", (call("1"),)) if turn == 0 else ("A: 2", None)

    skipped = Request(id="p0", messages=({"role": "user", "content": "skip me"},), n=2, seed=0)
    other = Request(id="p2", messages=({"role": "user", "content": "go"},), n=2, seed=7)
    out = sample_with_tools(Scripted(reply), [skipped, other], ran([]), PythonTool())
    assert out[0] == [] and [c.text for c in out[1]] == ["A: 2", ""]  # never the earlier turn's text
    assert out[1][1].finish_reason == "length" and out[1][1].index == 1
    trajectories.check(json.loads(out[1][1].messages))


def test_output_is_cut_to_what_the_model_may_read_and_a_failed_run_says_its_status():
    def run(calls):
        return [Run("timeout", "x" * 5000, "Traceback")]

    def reply(r, turn):
        return ("", (call("while 1: pass"),)) if turn == 0 else ("A: ?", None)

    one = Request(id="p", messages=({"role": "user", "content": "q"},), n=1)
    out = sample_with_tools(Scripted(reply), [one], run, PythonTool(output_chars=100))
    told = json.loads(out[0][0].messages)[2]["content"]
    assert told.startswith("[timeout]\nxxx") and told.endswith("more characters cut]") and len(told) < 160


def test_a_tool_the_recipe_cannot_have_is_one_error_line(tmp_path):
    head = "name: x\nproblems: {name: toy, source: {path: p.jsonl}}\nexport: {name: x}\nteachers:\n  - "
    cases = {"{name: t, engine: vllm, model: m, python_tool: {max_calls: 2}}": "python_tool: style chat needs",
             "{name: t, engine: openai, model: m, python_tool: {max_calls: 0}}": "max_calls: Input should be greater",
             "{name: t, engine: openai, model: m, python_tool: {shell: true}}": "python_tool.shell: unknown field",
             "{name: t, engine: openai, model: m, python_tool: {output_chars: -1}}": "output_chars"}
    for teacher, words in cases.items():
        (tmp_path / "r.yaml").write_text(head + teacher + "\n")
        with pytest.raises(ConfigError) as e:
            load_recipe(tmp_path / "r.yaml")
        assert words in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "r.yaml").write_text(head + "{name: t, engine: openai, model: m, python_tool: {}}\n")  # control
    assert load_recipe(tmp_path / "r.yaml").teachers[0].python_tool == PythonTool()
