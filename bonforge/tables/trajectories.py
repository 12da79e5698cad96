"""Trajectories: a candidate that acted (called tools, took several turns), as an OpenAI-style message list.

A trajectory is the whole conversation as it was sent and answered: its prompt (``system`` / ``user``
messages), then the model's ``assistant`` turns (text, ``tool_calls``) and the ``tool`` messages that answer
them, ending with the assistant's final answer. bonforge stores it in the candidate's ``messages`` column
as JSON text (every message and every field kept, in order), and the final answer in ``text``, which the
judges read as they read any answer: a tool's output never reaches the judge unless the model wrote it
into its final turn.

Every list read here is hostile until checked: ``check`` refuses anything a trainer could not replay (an
unknown role, a tool message answering no open call, a call without a name, a trajectory that ends without
an answer) with one error naming the message and field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from bonforge.tables.records import load_json

ROLES = ("system", "user", "assistant", "tool")
# The trainers' typed shape of a message (TRL's tool-calling SFT, verl's multi-turn dataset): the fields both
# read. Other fields of an imported message stay in the stored JSON (``messages``) but not in this shape.
TOOL_CALL = pa.struct([("id", pa.string()), ("type", pa.string()),
                       ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())]))])
MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string()), ("tool_calls", pa.list_(TOOL_CALL)),
                     ("tool_call_id", pa.string()), ("name", pa.string())])
MESSAGES = pa.list_(MESSAGE)


class Malformed(ValueError):
    """What is wrong with a trajectory, and where in it (``field``: ``[i].tool_calls[j].function.name``)."""

    def __init__(self, message: str, field: str = ""):
        super().__init__(message)
        self.message, self.field = message, field


@dataclass(frozen=True)
class Facts:
    """What a trajectory did: its assistant turns, the tool calls it made and the tool messages it got."""

    turns: int
    calls: int
    tool_messages: int


def _text(value: Any, where: str, *, optional: bool) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        kind = "null" if value is None else type(value).__name__
        raise Malformed(f"expected text, got {kind}" + (" (content parts lists are not read: give the text)"
                                                          if isinstance(value, list) else ""), where)
    return value


def _calls(calls: Any, where: str) -> list[str]:
    if not isinstance(calls, list) or not calls:
        raise Malformed("expected a non-empty list of tool calls", where)
    ids = []
    for j, call in enumerate(calls):
        at = f"{where}[{j}]"
        if not isinstance(call, dict):
            raise Malformed("expected an object", at)
        ids.append(_text(call.get("id"), f"{at}.id", optional=False))
        if call.get("type", "function") != "function":
            raise Malformed(f"only 'function' tool calls are read, got {call.get('type')!r}", f"{at}.type")
        function = call.get("function")
        if not isinstance(function, dict):
            raise Malformed("expected an object with name and arguments", f"{at}.function")
        if not _text(function.get("name"), f"{at}.function.name", optional=False):
            raise Malformed("empty tool name", f"{at}.function.name")
        _text(function.get("arguments"), f"{at}.function.arguments", optional=False)
    if len(set(ids)) != len(ids):
        raise Malformed("two tool calls share an id", where)
    return ids


def check(messages: Any) -> Facts:
    """``messages`` as a trajectory, or ``Malformed``: a list of message objects with known roles, each tool
    message answering a call of the assistant turn before it (by ``tool_call_id``, once), at least one
    assistant turn, the last message an assistant's answer (text, no calls left open)."""
    if not isinstance(messages, list) or not messages:
        raise Malformed("expected a non-empty list of messages")
    open_calls: set[str] = set()
    turns = calls = tools = 0
    for i, message in enumerate(messages):
        at = f"[{i}]"
        if not isinstance(message, dict):
            raise Malformed("expected a message object", at)
        try:  # stored as JSON: a Parquet pool's bytes or dates, NaN (no JSON number) are refused here, by name
            json.dumps(message, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise Malformed(f"a value JSON cannot hold ({str(e)[:80]})", at) from None
        role = message.get("role")
        if role not in ROLES:
            raise Malformed(f"unknown role {role!r} (one of {', '.join(ROLES)})", f"{at}.role")
        for key in ("name", "tool_call_id"):  # fields of the trainers' typed shape (``MESSAGE``): text or absent
            _text(message.get(key), f"{at}.{key}", optional=True)
        if role != "assistant" and message.get("tool_calls") is not None:
            raise Malformed(f"a {role} message makes no tool calls", f"{at}.tool_calls")
        if role == "tool":
            call_id = _text(message.get("tool_call_id"), f"{at}.tool_call_id", optional=False)
            if call_id not in open_calls:
                raise Malformed(f"answers no open tool call ({call_id[:80]!r})", f"{at}.tool_call_id")
            open_calls.discard(call_id)
            _text(message.get("content"), f"{at}.content", optional=False)
            tools += 1
            continue
        if open_calls:
            raise Malformed(f"{len(open_calls)} tool call(s) of the turn before got no tool message", at)
        has_calls = role == "assistant" and message.get("tool_calls") not in (None, [])
        _text(message.get("content"), f"{at}.content", optional=has_calls)
        if has_calls:
            ids = _calls(message["tool_calls"], f"{at}.tool_calls")
            open_calls.update(ids)
            calls += len(ids)
        turns += role == "assistant"
    last = messages[-1]
    if last.get("role") != "assistant" or last.get("tool_calls") or last.get("content") is None:
        raise Malformed("the trajectory does not end with the assistant's answer", f"[{len(messages) - 1}]")
    return Facts(turns=turns, calls=calls, tool_messages=tools)


def answer(messages: list[dict]) -> str:
    """The final answer of a checked trajectory: its last assistant message's text."""
    return messages[-1]["content"]


def dumps(messages: list[dict]) -> str:
    """A trajectory as the JSON text the ``messages`` column stores (every field, in order)."""
    return json.dumps(messages, ensure_ascii=False, separators=(",", ":"))


def typed(stored: str | None) -> list[dict] | None:
    """A stored trajectory in the trainers' typed shape (``MESSAGES``); null stays null."""
    if stored is None:
        return None
    return [{"role": m["role"], "content": m.get("content"), "tool_calls": m.get("tool_calls") or None,
             "tool_call_id": m.get("tool_call_id"), "name": m.get("name")} for m in json.loads(stored)]


def any_in(inputs) -> bool:
    """Whether a stage's ``candidates`` input holds a trajectory (a store written before them has no column)."""
    return ("messages" in inputs.columns("candidates")
            and inputs.sql("SELECT count(messages) AS n FROM candidates").column("n")[0].as_py() > 0)


COMPACT_OUTPUT_CHARS = 400  # of each tool message, in ``compact`` (more is cut, and the cut said)


def _fenced(tag: str, body: str) -> str:
    """``body`` in a fence longer than any run of backticks in it, so that nothing in it closes the block (a
    tool's output cannot step out of its block and pass for the model's own text)."""
    fence = "`" * max([3, *(len(run) + 1 for run in re.findall("`{3,}", body))])
    return f"{fence}{tag}\n{body}\n{fence}"


def compact(stored: str) -> str:
    """A trajectory as one text for a reader that judges answers (a GenSelect prompt): from the model's first
    turn on, its text; each Python call as a fenced ``python`` block (another tool's call as its name and
    arguments; a call whose block the text already holds, as in a fenced trajectory, once); each tool message
    as a fenced ``output`` block of at most ``COMPACT_OUTPUT_CHARS`` characters (each fence longer than a
    backtick run inside it); the final answer last. The prompt before the first assistant turn is left out
    (the reader has the question)."""
    messages = json.loads(stored)
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    parts = []
    for m in messages[first:]:
        if m["role"] == "tool":
            out, keep = m.get("content") or "", COMPACT_OUTPUT_CHARS
            cut = f"\n[... {len(out) - keep} more characters]" if len(out) > keep else ""
            parts.append(_fenced("output", f"{out[:keep]}{cut}"))
            continue
        if m.get("content"):
            parts.append(m["content"])
        for call in m.get("tool_calls") or []:
            function = call["function"]
            try:  # arguments are the model's text: not JSON, too deep, a lone surrogate are shown as they are
                code = load_json(function["arguments"]).get("code")
            except (ValueError, AttributeError):
                code = None
            if function["name"] == "python" and isinstance(code, str):
                if f"```python\n{code}" not in (m.get("content") or ""):  # a fenced block shows it already
                    parts.append(_fenced("python", code))
            else:
                parts.append(f"[tool call {function['name']}: {function['arguments']}]")
    return "\n\n".join(parts)
