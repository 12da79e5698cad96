"""A model's Python tool calls, run in the sandbox pool like any candidate program.

A trajectory's session keeps its state from call to call by replay: each call runs one fresh program that
first runs the trajectory's earlier calls (their output discarded, what they write to the output descriptors
too, their errors ignored), then the new one.
Nothing lives between calls, so nothing a call leaves behind (files, processes, memory) can reach another
trajectory or outlast its own: each run is a candidate program with every limit and isolation of the pool,
and the statuses are the pool's (a fork bomb, a flood or a hog gets the verdict it gets as a candidate).
The price is time: call k runs the k-1 before it again (calls per trajectory are few and bounded).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.pool import shared_pool
from bonforge.sandbox.wire import Limits

_REPLAY = '''import contextlib as _c, io as _io, json as _j, os as _o, sys as _s
_cells = _j.loads({cells!r})
_space = {{"__name__": "__main__", "__builtins__": __builtins__}}
_fds = [(_o.dup(fd), fd) for fd in (1, 2)]
_null = _o.open(_o.devnull, _o.O_WRONLY)
for _cell in _cells[:-1]:
    for _saved, _fd in _fds:  # what an earlier call writes to the descriptors (os.write, a child) is dropped too
        _o.dup2(_null, _fd)
    with _c.redirect_stdout(_io.StringIO()), _c.redirect_stderr(_io.StringIO()):
        try:
            exec(compile(_cell, "<earlier call>", "exec"), _space)
        except BaseException:
            pass
for _f in (_s.__stdout__, _s.__stderr__):
    try:
        _f.flush()
    except BaseException:
        pass
for _saved, _fd in _fds:
    _o.dup2(_saved, _fd)
    _o.close(_saved)
_o.close(_null)
del _c, _io, _j, _o, _s, _fds, _null
try:
    exec(compile(_cells[-1], "<call>", "exec"), _space)
except MemoryError:
    raise
except Exception:  # what it printed before the error stays readable (a failed run's stdout is not kept)
    import sys as _s, traceback as _t
    _s.stdout.flush()
    _s.stderr.write("".join(_t.format_exception(*_s.exc_info())[:1] + _t.format_exception(*_s.exc_info())[2:]))
'''


_FAILED = "Traceback (most recent call last):"
_OWN_FRAME = re.compile(r'  File "[^"\n]*", line \d+, in <module>\n    exec\(compile\(_cells\[-1\][^\n]*\n')


def replay_program(cells: list[str]) -> str:
    """The program of a trajectory's newest call (``cells[-1]``) after its earlier ones (``cells[:-1]``)."""
    return _REPLAY.format(cells=json.dumps(cells))


@dataclass(frozen=True)
class ToolRun:
    """What one call did: the pool's status for its run (``ok``, ``runtime_error``, ``timeout``, ...), what it
    printed (stdout, then stderr), its CPU seconds, and whether its program ran to its end (``replayable``: its
    error, if any, was caught; false where a limit, a signal or an exit ended it, which would end every later
    call's replay too)."""

    status: str
    stdout: str
    stderr: str
    cpu_s: float
    replayable: bool = True

    def shown(self, limit: int) -> str:
        """What the model reads: stdout, then stderr, a failed run's status first (``[timeout]``), cut to
        ``limit`` characters with the cut said."""
        text = self.stdout + (("\n" if self.stdout and not self.stdout.endswith("\n") else "") + self.stderr
                              if self.stderr else "")
        if self.status != "ok":
            text = f"[{self.status}]\n{text}"
        if len(text) > limit:
            text = text[:limit] + f"\n[... {len(text) - limit} more characters cut]"
        return text


class PythonCalls:
    """Runs batches of calls on the build's sandbox pool (``cfg``: the recipe's ``verify.code``), each under
    ``time_limit_s`` of CPU and the pool's memory and output caps."""

    def __init__(self, cfg: CodeVerifyConfig, time_limit_s: float):
        self.cfg, self.limits = cfg, Limits(time_limit_s, cfg.wall_factor, cfg.memory_mb, cfg.output_limit_bytes)

    def __call__(self, calls: list[list[str]]) -> list[ToolRun]:
        """One run per entry: a trajectory's cells so far, its newest last."""
        requests = [{"id": f"tool-{i}", "kind": "stdio", "program": replay_program(cells), "prelude": "",
                     "fn_name": None, "tests": [{"input": ""}], **self.limits.fields(),
                     "budget": self.limits.wall_limit, "stop_on_failure": True} for i, cells in enumerate(calls)]
        outcomes = shared_pool(self.cfg).run(requests) if requests else []
        runs = []
        for outcome in outcomes:
            result = (outcome.get("results") or [{}])[0]
            status = result.get("status") or "sandbox_error"
            ended = status == "ok"
            if ended and str(result.get("stderr") or "").startswith(_FAILED):
                status = "runtime_error"
            runs.append(ToolRun(status, str(result.get("stdout") or ""),
                                _OWN_FRAME.sub("", str(result.get("stderr") or result.get("error") or "")),
                                float(result.get("cpu_s") or 0), ended))
        return runs
