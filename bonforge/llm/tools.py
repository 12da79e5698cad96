"""Sampling with a Python tool: each sample is a trajectory of turns, the model's tool calls run between them.

Works over any engine that returns chat tool calls (``Completion.tool_calls``: the `openai` engine). Turns go
in rounds: every trajectory still going asks for its next turn in one ``generate`` call (each its own request,
``n=1``, the sample's own seed), then every call made in that turn runs in one batch of the sandbox
(``run``: a trajectory's cells so far, its newest last, ``bonforge.sandbox.tool_calls``). After
``max_calls`` calls the next turn is asked without tools, for the answer. A call whose program did not run
to its end (a limit, a signal, an exit: ``ToolRun.replayable``) is left out of the later calls' replays (the
session goes on as a restarted one would: without its state), else it would end every later call too. What
the server sends is hostile: a call to another tool, arguments that are not JSON with a ``code`` string, a
missing or repeated call id each get a tool message saying so (nothing runs) with an id of ours, so every
stored trajectory is one a trainer can replay (``bonforge.tables.trajectories.check`` holds for it before it is
kept). A turn that fails past its retries (``Unfinished`` from the engine) ends its trajectory alone: the call
raises ``Unfinished`` with every trajectory that ended, as the engine does for a batch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Callable

from bonforge.errors import TransientError
from bonforge.llm.base import Completion, Engine, Progress, Request, Unfinished, unfinished, valid_text
from bonforge.llm.config import PythonTool
from bonforge.tables import trajectories

NAME = "python"
SCHEMA = {"type": "function", "function": {
    "name": NAME, "description": "Run Python 3 code and read what it prints (stdout, then stderr). Variables and "
    "functions of your earlier calls in this conversation are defined again before it runs.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string", "description": "The code to run."}},
                   "required": ["code"]}}}  # fmt: skip


@dataclass
class _Trajectory:
    request: Request
    index: int
    messages: list[dict]
    cells: list[str | None] = field(default_factory=list)
    calls: int = 0
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0
    failed: str | None = None  # why a turn failed past its retries (the trajectory is lost, the others kept)
    last: Completion | None = None
    done: bool = False


def call_message(k: int, name: str, arguments: str) -> dict:
    """A trajectory's ``k``-th call as stored, with the id we give it."""
    return {"id": f"call_{k}", "type": "function", "function": {"name": name, "arguments": arguments}}


def _code(call: dict) -> tuple[str | None, str]:
    """The code of a call, or None and what is wrong with it."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or function.get("name") != NAME:
        name = function.get("name") if isinstance(function, dict) else None
        return None, f"error: no tool named {str(name)[:80]!r}; the one tool is {NAME!r}"
    try:
        args = json.loads(function.get("arguments") or "")
    except (TypeError, ValueError, RecursionError):
        args = None
    if not isinstance(args, dict) or not isinstance(args.get("code"), str):
        return None, 'error: the arguments must be a JSON object {"code": "<python code>"}'
    return args["code"], ""


def _turn(t: _Trajectory, c: Completion, allowed: int) -> list[tuple[dict, str | None, str]]:
    """Adds ``c`` to ``t``: the answer (the trajectory is done) or an assistant turn with its first ``allowed``
    calls; returns each call as (its message with the id we give it, its code, or None and why it cannot run)."""
    add_tokens(t, c)
    t.last = c
    if not (allowed and c.tool_calls):
        t.messages.append({"role": "assistant", "content": c.text})
        t.done = True
        return []
    out = []
    for call in c.tool_calls[:allowed]:
        code, why = _code(call)
        given = call.get("function") if isinstance(call, dict) else None
        given = given if isinstance(given, dict) else {}
        name, arguments = valid_text(str(given.get("name") or "?")[:200]), valid_text(str(given.get("arguments") or ""))
        made = call_message(t.calls, name, arguments)
        t.calls += 1
        out.append((made, code, why))
    t.messages.append({"role": "assistant", "content": c.text or None, "tool_calls": [m for m, _, _ in out]})
    return out


def sample_with_tools(engine: Engine, requests: list[Request], run: Callable[[list[list[str]]], list],
                      tool: PythonTool, progress: Progress | None = None) -> list[list[Completion]]:
    """Each request's ``n`` samples as trajectories; for each request, its completions by sample index (the
    final turn's text, the tokens of every turn, ``messages`` the whole conversation). A prompt the engine
    skips (too long for the window) on the first turn skips the request; on a later turn it ends the
    trajectory with an empty answer (``finish_reason`` ``length``)."""
    mine = [[_Trajectory(r, i, list(r.messages or ())) for i in range(r.n)] for r in requests]
    skipped: set[int] = set()  # requests whose first turn the engine skipped
    finished, transient = 0, True
    for turn in range(tool.max_calls + 1):
        going = [t for k, ts in enumerate(mine) if k not in skipped for t in ts if not t.done]
        if not going:
            break
        asks = [replace(t.request, id=f"{t.request.id}#{t.index}", messages=tuple(t.messages), n=1,
                        seed=t.request.sample_seed(t.index), tools=(SCHEMA,) if t.calls < tool.max_calls else None)
                for t in going]
        pending: list[tuple[_Trajectory, dict, str | None, str]] = []
        answers, ok = answers_of(engine, going, asks)
        transient = transient and ok
        for t, got in zip(going, answers):
            if t.failed:
                continue
            if got:
                pending += [(t, *call) for call in _turn(t, got[0], tool.max_calls - t.calls)]
            elif turn == 0:
                skipped.add(next(k for k, ts in enumerate(mine) if t in ts))
            else:
                t.messages.append({"role": "assistant", "content": ""})
                # the answer is this empty message: no earlier turn's text reaches the judges as the answer
                t.done, t.last = True, replace(t.last, text="", reasoning=None, finish_reason="length")
            if t.done and progress is not None:
                finished += 1
                progress(finished)
        cells, at = [], []
        for t, _, code, _ in pending:
            if code is not None:
                at.append(len(t.cells))
                t.cells.append(code)
                cells.append(list(t.cells))
        runs, places = iter(run(cells)), iter(at)
        for t, made, code, why in pending:
            if code is not None:
                r, place = next(runs), next(places)
                why = valid_text(r.shown(tool.output_chars))  # a program may print what is no valid text
                if not r.replayable:  # it would end every later replay too: the session goes on without it
                    t.cells[place] = None
            t.messages.append({"role": "tool", "tool_call_id": made["id"], "content": why})
        for t in going:
            t.cells = [c for c in t.cells if c is not None]
    return ended(mine, skipped, transient)


def add_tokens(t, c: Completion) -> None:
    """Adds a turn's token counts to its trajectory's (``t``); a count the server did not give (or gave past
    reason) is unknown, and so is the trajectory's total from then on."""
    for k in ("prompt_tokens", "completion_tokens"):
        mine, more = getattr(t, k), getattr(c, k)
        setattr(t, k, None if mine is None or more is None else mine + more)


def answers_of(engine: Engine, going: list, asks: list[Request]) -> tuple[list[list[Completion]], bool]:
    """``engine.generate(asks)`` for the trajectories ``going`` (one ask each); a turn that failed past its
    retries ends its trajectory only (its ``failed``, the engine's reason): (the answers, whether every such
    failure was transient)."""
    try:
        return engine.generate(asks), True
    except Unfinished as e:
        lost = {rid: why for rid, _, why in e.failed}
        for t, ask in zip(going, asks):
            if ask.id in lost:
                t.failed, t.done = lost[ask.id], True
        return e.results, isinstance(e, TransientError)


def ended(mine: list[list], skipped: set[int], transient: bool) -> list[list[Completion]]:
    """Each request's finished trajectories as completions (none for a skipped request); where some failed,
    ``Unfinished`` with them, as the engine says of a batch: those that ended are kept, the failed ones named."""
    out = [[] if k in skipped else [completion(t) for t in ts if not t.failed] for k, ts in enumerate(mine)]
    failed = [(t.request.id, t.index, t.failed, transient) for ts in mine for t in ts if t.failed]
    if failed:
        raise unfinished(out, failed, sum(len(ts) for ts in mine))
    return out


def completion(t) -> Completion:
    """A finished trajectory (``_Trajectory`` or ``bonforge.llm.fenced``'s) as its sample's completion."""
    trajectories.check(t.messages)  # ours by construction: a failure here is a bug, never a stored row
    return replace(t.last, request_id=t.request.id, index=t.index, seed=t.request.sample_seed(t.index),
                   text=trajectories.answer(t.messages),
                   tool_calls=None, prompt_tokens=t.prompt_tokens, completion_tokens=t.completion_tokens,
                   messages=trajectories.dumps(t.messages))
