"""The tool loop against a scripted engine whose replies are hostile: every stored trajectory is one a trainer
can replay (ids of ours, one tool message per call, an answer last), a call that cannot run gets a tool message
saying why and runs nothing, the call budget holds and the turn after it is asked without tools, and each
sample keeps its own seed on every turn."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from bonforge.config import load_recipe
from bonforge.errors import ConfigError
from bonforge.llm.base import Completion, Request
from bonforge.llm.config import PythonTool
from bonforge.llm.tools import SCHEMA, sample_with_tools
from bonforge.sandbox.tool_calls import ToolRun
from bonforge.tables import trajectories


def call(code=None, name="python", arguments=None, cid="x") -> dict:
    args = json.dumps({"code": code}) if arguments is None else arguments
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


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
        return [ToolRun("ok", f"ran {len(cells)} cells: {cells[-1]}\n", "", 0.0) for cells in calls]
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
        return [ToolRun("timeout", "x" * 5000, "Traceback", 2.0)]

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


def test_a_late_skip_keeps_no_earlier_turns_text_as_the_answer():
    """The judges read ``text``: after a skipped turn it is the trajectory's last message (empty), never the
    text a turn with calls wrote (a right answer written beside a call, then the window runs out)."""
    def reply(r, turn):
        if turn == 1 and r.id == "p#0":
            return None  # the engine skips the prompt: too long for the window
        return ("A: 5", (call("print(5)"),)) if turn == 0 else ("A: 5", None)

    one = Request(id="p", messages=({"role": "user", "content": "q"},), n=2)
    out = sample_with_tools(Scripted(reply), [one], ran([]), PythonTool())
    skipped, control = out[0]
    assert json.loads(skipped.messages)[-1] == {"role": "assistant", "content": ""}
    assert skipped.text == "" and skipped.finish_reason == "length" and skipped.reasoning is None
    assert control.text == "A: 5" and control.finish_reason == "stop"



def test_an_answer_hidden_in_a_calls_arguments_is_never_the_answer():
    """The model puts the right answer only in its calls' code: beside a call that runs (sample 0), and in a call
    on the turn asked without tools (sample 1, where the call is dropped). Neither text holds it, so the maths
    judge finds no answer; the control answers in its text (sample 2)."""
    from bonforge.judging.math import check_answer

    def reply(r, turn):
        hidden = call("print(1)  # \\boxed{5}")
        if r.seed == 102:
            return "So it is \\boxed{5}.", None
        if r.tools is not None:
            return "", (hidden,)
        return ("I am not sure.", None) if r.seed == 100 else ("", (hidden,))

    three = Request(id="p", messages=({"role": "user", "content": "Add 2 and 3."},), n=3, seed=100, max_tokens=50)
    out = sample_with_tools(Scripted(reply), [three], ran([]), PythonTool(max_calls=1))[0]
    assert [c.text for c in out] == ["I am not sure.", "", "So it is \\boxed{5}."]
    assert all("boxed" in json.loads(c.messages)[1]["tool_calls"][0]["function"]["arguments"] for c in out[:2])
    assert [check_answer(c.text, "5").status for c in out] == ["no_answer", "no_answer", "correct"]

def test_a_call_that_did_not_run_to_its_end_is_not_replayed_before_the_next():
    """A call ended by a limit or a signal would end every later replay too: the session goes on without it
    (as a restarted one would); a call that raised stays (its state up to the error)."""
    statuses = {"while 1: pass": "timeout", "x = [0] * 10**12": "memory_limit", "1 / 0": "runtime_error"}
    log = []

    def run(calls):
        log.append(calls)
        return [ToolRun(statuses.get(cells[-1], "ok"), "", "", 0.0,
                        replayable=cells[-1] not in statuses or cells[-1] == "1 / 0") for cells in calls]

    codes = ["while 1: pass", "x = 1", "x = [0] * 10**12", "1 / 0", "print(x)"]

    def reply(r, turn):
        return ("", (call(codes[turn]),)) if turn < len(codes) else ("A: 1", None)

    one = Request(id="p", messages=({"role": "user", "content": "q"},), n=1)
    sample_with_tools(Scripted(reply), [one], run, PythonTool(max_calls=8))
    assert [batch[0] for batch in log if batch] == [["while 1: pass"], ["x = 1"], ["x = 1", "x = [0] * 10**12"],
                                           ["x = 1", "1 / 0"], ["x = 1", "1 / 0", "print(x)"]]


def test_lone_surrogates_from_the_server_or_a_program_are_stored_as_valid_text():
    """JSON may escape half a surrogate pair (``\\ud800``): in a call's name or arguments from the server or in
    what a program printed, it becomes U+FFFD, so the trajectory is text a column holds; the code still runs."""
    def run(calls):
        return [ToolRun("ok", "out \udcff\n", "err \ud800", 0.0) for _ in calls]

    def reply(r, turn):
        return ("", (call(arguments='{"code": "print(\'\\ud800\')"}'), call(name="py\udc00"))) if turn == 0 \
            else ("A: 1", None)

    one = Request(id="p", messages=({"role": "user", "content": "q"},), n=1)
    stored = sample_with_tools(Scripted(reply), [one], run, PythonTool())[0][0].messages
    assert pa.array([stored]).to_pylist() == [stored]
    messages = json.loads(stored)
    assert messages[2]["content"] == "out \ufffd\nerr \ufffd" and "no tool named 'py\\udc00'" in messages[3]["content"]
    assert messages[1]["tool_calls"][1]["function"]["name"] == "py\ufffd"


def test_a_turn_that_fails_past_its_retries_loses_its_trajectory_only():
    """The engine says one sample's second turn failed alone (as a batch of the openai engine does): the other
    trajectories end and come back in the error; the failed one is named, transient as its failure was."""
    from bonforge.llm.base import UnfinishedForNow

    class Failing(Scripted):
        def generate(self, requests, progress=None):
            out = super().generate(requests, progress)
            lost = [i for i, r in enumerate(requests) if r.id == "p1#1" and r.messages[-1]["role"] == "tool"]
            if lost:
                out[lost[0]] = []
                raise UnfinishedForNow(out, [("p1#1", 0, "HTTP 429")], len(requests))
            return out

    def reply(r, turn):
        return ("", (call("print(1)"),)) if turn == 0 else ("A: 1", None)

    with pytest.raises(UnfinishedForNow, match="1 of 2 samples failed") as e:
        sample_with_tools(Failing(reply), [REQ], ran([]), PythonTool())
    assert [c.index for c in e.value.results[0]] == [0] and e.value.results[0][0].text == "A: 1"
    assert e.value.failed == [("p1", 1, "HTTP 429")]


def test_early_stopping_without_rounds_and_a_tool_is_refused(tmp_path):
    head = ("name: x\nproblems: {name: toy, source: {path: p.jsonl}}\nexport: {name: x}\nfilter: {early_stop: true}\n"
            "teachers:\n  - {name: t, engine: openai, model: m, python_tool: {}}\n")
    (tmp_path / "r.yaml").write_text(head)
    with pytest.raises(ConfigError, match="python_tool: early stopping without rounds"):
        load_recipe(tmp_path / "r.yaml")
    (tmp_path / "r.yaml").write_text(head + "engine: {streaming: false}\n")  # in rounds: the tool runs
    assert load_recipe(tmp_path / "r.yaml").teachers[0].python_tool == PythonTool()
