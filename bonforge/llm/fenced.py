"""Fenced tool-integrated reasoning: the model writes ```python blocks, and each runs where the model closes it.

Works over every engine. Generation stops at ``FENCE`` (a line of three backticks: it never matches an opening
```` ```python ```` line, and matches every closing one). If the text so far ends inside an open ``python``
block, that block's code runs in the sandbox (``run``: a trajectory's cells so far, its newest last), the
closing fence and an ``output`` block holding what it printed are appended, and the SAME sequence goes on: the
next request carries the prompt and an assistant message holding the text so far, continued in place
(``Request.continue_final``; a raw-text prompt simply grows). Any other fence (a bare opening one, the end of a
text block, an ``output`` block the model wrote itself) is appended as the model wrote it and generation goes
on. Each pause counts toward ``max_calls``, whether it ran code or not; after the last, one more request without
the ``FENCE`` stop finishes the answer. ``max_tokens`` holds for the whole sequence, not for each request.

Stored like chat tool calls (``bonforge.tables.trajectories``), so every view and export reads it: each pause that
ran code is an assistant message (the model's text up to and including its closing fence) with one ``python``
call (``{"code": ...}``) and a tool message holding the output; the text after the last output is the final
assistant message (the candidate's ``text``, the one the judges read). Assistant messages hold only what the
model wrote, tool messages only what ran: an ``output`` block the model forged stays in its own text. ``inline``
gives back the one sequence the model continued, byte for byte.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Callable

from bonforge.llm.base import Completion, Engine, Progress, Request, valid_text
from bonforge.llm.config import PythonTool
from bonforge.llm.tools import NAME, add_tokens, answers_of, call_message, ended

FENCE = "```\n"
_LINE = re.compile(r"(?m)^ {0,3}(`{3,})([^`\n]*)$")  # a fence line: its backticks and its info string


def open_python(text: str) -> str | None:
    """The code of the ``python`` block ``text`` ends inside (the text after its opening line), or None when
    it ends outside one. A block opens on a fence line with an info string and closes on a fence line of at
    least as many backticks and none (CommonMark); a fence line inside a block (```` ```python ```` nested
    in a string of the code) is code."""
    opened: re.Match | None = None
    for line in _LINE.finditer(text):
        if opened is None:
            opened = line
        elif not line.group(2).strip() and len(line.group(1)) >= len(opened.group(1)):
            opened = None
    if opened is None or opened.group(2).strip().lower() not in ("python", "py", "python3"):
        return None
    return text[opened.end() + 1:]


def output_block(output: str) -> str:
    """What is appended after a block that ran: its output in an ``output`` fence longer than any run of
    backticks in it, so what a program prints can never close the block early."""
    ticks = "`" * max(3, 1 + max((len(r) for r in re.findall(r"`+", output)), default=0))
    return f"{ticks}output\n{output}{'' if output.endswith(chr(10)) or not output else chr(10)}{ticks}\n"


def inline(messages: list[dict]) -> str:
    """A fenced trajectory's turns (after its prompt) as the one text the model continued: each assistant
    message's text, each tool message as its ``output_block``."""
    return "".join(output_block(m["content"]) if m["role"] == "tool" else m["content"] or "" for m in messages)


@dataclass
class _Sequence:
    request: Request
    index: int
    prompt: int  # messages of the prompt
    messages: list[dict]
    segment: str = ""  # the model's text since the last output block
    cells: list[str] = field(default_factory=list)  # the calls a later call replays (those that ran to their end)
    calls: int = 0
    pauses: int = 0
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0
    spent: int = 0  # of max_tokens: an unknown count spends the whole request's allowance
    failed: str | None = None
    last: Completion | None = None
    done: bool = False

    def ask(self, tool: PythonTool) -> Request:
        r, text = self.request, inline(self.messages[self.prompt:]) + self.segment
        stop = r.stop + (FENCE,) if self.pauses < tool.max_calls else r.stop
        where = {"prompt": r.prompt + text} if r.prompt is not None else {} if not text else {
            "messages": (*r.messages, {"role": "assistant", "content": text}), "continue_final": True}
        return replace(r, id=f"{r.id}#{self.index}", n=1, seed=r.sample_seed(self.index), stop=stop,
                       max_tokens=r.max_tokens - self.spent, **where)

    def end(self, finish: str | None = None) -> None:
        self.messages.append({"role": "assistant", "content": self.segment})
        self.done = True
        if finish is not None:
            self.last = replace(self.last, finish_reason=finish)


def _read(s: _Sequence, c: Completion, tool: PythonTool) -> str | None:
    """Adds ``c`` to ``s``; returns the code to run when it paused inside a python block."""
    add_tokens(s, c)
    s.spent = s.request.max_tokens if c.completion_tokens is None else s.spent + c.completion_tokens
    s.last, s.segment = c, s.segment + (c.text if c.reasoning is None else f"<think>{c.reasoning}</think>{c.text}")
    code = open_python(s.segment)
    fenced = c.stop_reason == FENCE or (c.stop_reason is None and code is not None)
    if c.finish_reason != "stop" or s.pauses >= tool.max_calls or not fenced:
        s.end()
        return None
    s.pauses += 1
    s.segment += FENCE
    if s.spent >= s.request.max_tokens:
        s.end("length")
        return None
    if code is None:  # a fence that closes no python block: as written, and on
        return None
    s.cells.append(code)
    s.calls += 1
    s.messages.append({"role": "assistant", "content": s.segment, "tool_calls": [
        call_message(s.calls - 1, NAME, json.dumps({"code": code}, ensure_ascii=False))]})
    s.segment = ""
    return code


def sample_fenced(engine: Engine, requests: list[Request], run: Callable[[list[list[str]]], list],
                  tool: PythonTool, progress: Progress | None = None) -> list[list[Completion]]:
    """Each request's ``n`` samples as fenced trajectories (as ``bonforge.llm.tools.sample_with_tools``
    returns them). A prompt the engine skips on the first request skips the request; later, it ends the
    trajectory where it is (``finish_reason`` ``length``)."""
    mine = [[_Sequence(r, i, len(r.messages or ()), list(r.messages or ())) for i in range(r.n)] for r in requests]
    skipped: set[int] = set()
    finished, transient = 0, True
    for turn in range(tool.max_calls + 1):
        going = [(k, s) for k, ss in enumerate(mine) if k not in skipped for s in ss if not s.done]
        if not going:
            break
        ran: list[_Sequence] = []
        asks = [s.ask(tool) for _, s in going]
        answers, ok = answers_of(engine, [s for _, s in going], asks)
        transient = transient and ok
        for (k, s), got in zip(going, answers):
            if s.failed:
                continue
            if got:
                if _read(s, got[0], tool) is not None:
                    ran.append(s)
            elif turn == 0:
                skipped.add(k)
            else:
                s.end("length")
            if s.done and progress is not None:
                finished += 1
                progress(finished)
        for s, r in zip(ran, run([list(s.cells) for s in ran]) if ran else [], strict=True):
            s.messages.append({"role": "tool", "tool_call_id": f"call_{s.calls - 1}",
                               "content": valid_text(r.shown(tool.output_chars))})
            if not r.replayable:  # it would end every later replay too: the session goes on without it
                s.cells.pop()
    return ended(mine, skipped, transient)

