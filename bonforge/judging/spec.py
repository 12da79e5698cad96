"""The JSON test spec carried in ``problems.tests`` for code problems.

One JSON object, by ``kind``:

``stdio``   programs read stdin and write stdout (APPS, CodeContests, LiveCodeBench)::

    {"kind": "stdio", "tests": [{"input": "1 2\\n", "output": "3\\n"}, ...]}

``call``    a function (or a method of ``class Solution``) is called with JSON arguments::

    {"kind": "call", "fn_name": "add", "tests": [{"args": [1, 2], "output": 3}, ...],
     "starter": "class Solution:\\n    def add(self, a, b): ...",   # optional, informative
     "prelude": "from typing import *\\n"}                          # optional, run before the program

``assert``  HumanEval style: the program, then ``check`` (which must call the function and raise on a
            failure, e.g. ``def check(candidate): ...`` followed by ``check(entry_point)``)::

    {"kind": "assert", "entry_point": "add", "check": "def check(candidate): ...\\ncheck(add)\\n",
     "context": "def helper(x): ..."}                               # optional

    It counts as one test. The check runs apart from the candidate's process (``bonforge.sandbox.check_host``),
    with ``entry_point`` bound to a proxy of the program; ``context`` runs before it there (HumanEval: the
    prompt, whose helpers such as ``encode_cyclic`` the check calls). Both are the dataset's code, not
    trusted code: a problem table is untrusted data (docs/problems.md). Optional ``prelude`` as above (run
    before the program, and before the context).

Every kind may carry ``time_limit_s`` (overrides the stage's per-test limit): a finite positive number;
one over ``MAX_TIME_LIMIT_S`` is capped to it (the most a recipe's ``time_limit_s`` may be), NaN, an
infinity, zero or a negative number is the problem's error. Expected outputs never enter the sandbox:
the host compares them (see ``bonforge.judging.compare``).

Every kind may carry ``memory_mb`` (the problem's memory limit, MiB: a finite positive number; the recipe's
``memory_mb`` is the ceiling, and a problem without one gets the recipe's).

``stdio`` specs may carry a **checker**: a program that decides whether an output is right (any valid answer,
a float within tolerance, ...), in C++ with testlib's conventions (``checker input output answer``; exit 0
accepted, 1 wrong answer, 2 presentation error, 3 the checker failed), with the headers it includes::

    {"kind": "stdio", "tests": [...], "checker": {"source": "#include \"testlib.h\"\n...",
                                                  "files": {"testlib.h": "..."}}}

It is compiled once per problem and run in a sandbox of its own, never the candidate's
(``bonforge.sandbox.testlib``); without one, outputs are compared token by token (``bonforge.judging.compare``).

``stdio`` specs may carry **include** files: headers a C++ program of the problem may ``#include``, laid out as
a problem package is (Library Checker's): ``{"include": {"common/random.h": "...", "hpp/factor.hpp": "..."}}``,
paths relative to the package's folder (``common/`` holds the shared headers). A C++ program is then compiled as
``sol/main.cpp`` in that tree with ``-I common``, so ``#include "random.h"`` and ``#include "../hpp/factor.hpp"``
resolve as they do there (``bonforge.sandbox.languages.native_fields``).

``call`` specs may carry ``"wrapped_outputs": true``: an expected value that is a one-element list also
accepts its element (``[9]`` passes a function returning ``9``), as the APPS harness accepts either;
the APPS converter sets it, other formats compare strictly.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from bonforge.errors import DataError
from bonforge.tables.records import json_error, load_json

KINDS = ("stdio", "call", "assert")
MAX_TIME_LIMIT_S = 600.0  # the bound of CodeVerifyConfig.time_limit_s: no problem asks for more
MAX_MEMORY_MB = float(1 << 20)  # 1 TiB: a problem's memory limit over it is capped (the recipe's applies anyway)


@dataclass(frozen=True)
class TestSpec:
    kind: str
    inputs: list[Any]  # stdio: stdin strings; call: argument lists; assert: [None]
    outputs: list[Any]  # stdio: expected stdout; call: expected value; assert: [None]
    fn_name: str | None = None
    entry_point: str | None = None
    check: str = ""
    context: str = ""
    prelude: str = ""
    starter: str = ""
    time_limit_s: float | None = None
    wrapped_outputs: bool = False  # call: a one-element list expected also accepts its element (APPS)
    memory_mb: float | None = None  # the problem's memory limit (the recipe's is the ceiling)
    checker: dict | None = None  # stdio: {"source": C++ text, "files": {name: text}} (testlib conventions)
    include: dict | None = None  # stdio: {path in a package's tree: text}, headers a C++ program may include
    extra: dict = field(default_factory=dict)

    def to_json(self) -> str:
        doc: dict[str, Any] = {"kind": self.kind}
        if self.kind == "stdio":
            doc["tests"] = [{"input": i, "output": o} for i, o in zip(self.inputs, self.outputs, strict=True)]
        elif self.kind == "call":
            doc["fn_name"] = self.fn_name
            doc["tests"] = [{"args": i, "output": o} for i, o in zip(self.inputs, self.outputs, strict=True)]
            if self.wrapped_outputs:
                doc["wrapped_outputs"] = True
        else:
            doc["entry_point"], doc["check"] = self.entry_point, self.check
            if self.context:
                doc["context"] = self.context
        for key in ("prelude", "starter"):
            if getattr(self, key):
                doc[key] = getattr(self, key)
        if self.time_limit_s is not None:
            doc["time_limit_s"] = self.time_limit_s
        if self.memory_mb is not None:
            doc["memory_mb"] = self.memory_mb
        if self.checker is not None:
            doc["checker"] = self.checker
        if self.include is not None:
            doc["include"] = self.include
        return json.dumps(doc)


def parse_spec(text: str | None, problem_id: str) -> TestSpec:
    """Parse and check a problem's test spec; a malformed one raises ``DataError`` naming the problem."""

    def bad(msg: str) -> DataError:
        return DataError(msg, source="problems", record=problem_id, field="tests")

    if not text:
        raise bad("code problem has no test spec")
    try:
        doc = load_json(text)
    except ValueError as e:
        raise bad(json_error(e)) from None
    if not isinstance(doc, dict) or doc.get("kind") not in KINDS:
        raise bad(f"'kind' must be one of {', '.join(KINDS)}")
    kind = doc["kind"]
    limit = doc.get("time_limit_s")
    if limit is not None:
        if not positive_finite(limit):
            raise bad(f"'time_limit_s' must be a finite positive number, got {limit!r:.50}")
        limit = float(min(limit, MAX_TIME_LIMIT_S))
    memory = doc.get("memory_mb")
    if memory is not None:
        if not positive_finite(memory):
            raise bad(f"'memory_mb' must be a finite positive number (MiB), got {memory!r:.50}")
        memory = float(min(memory, MAX_MEMORY_MB))
    checker = doc.get("checker")
    if checker is not None:
        if kind != "stdio":
            raise bad("'checker' applies to stdio tests only")
        files = checker.get("files", {}) if isinstance(checker, dict) else None
        if not (isinstance(checker, dict) and isinstance(checker.get("source"), str) and checker["source"].strip()
                and isinstance(files, dict) and all(isinstance(v, str) for v in files.values())
                and all(isinstance(k, str) and k and "/" not in k and k not in (".", "..")
                        for k in files)):  # fmt: skip
            raise bad("'checker' must be {\"source\": C++ text, \"files\": {file name: text}}")
        checker = {"source": checker["source"], "files": dict(files)}
    include = doc.get("include")
    if include is not None:
        if kind != "stdio":
            raise bad("'include' applies to stdio tests only")
        if not (isinstance(include, dict) and all(isinstance(v, str) for v in include.values())
                and all(isinstance(k, str) and tree_path(k) for k in include)):  # fmt: skip
            raise bad("'include' must be {relative path: text}, each path of 1 to 8 names (no '.', '..' or '/' "
                      "at either end)")  # fmt: skip
        folders = {k.rsplit("/", i)[0] for k in include for i in range(1, k.count("/") + 1)} | {"sol"}
        clash = sorted(set(include) & (folders | {"sol/main.cpp", "main"}))
        if clash:
            raise bad(f"'include' path {clash[0][:100]!r} is a folder of another, or the program's own file")
        include = dict(include)
    for key in ("prelude", "starter"):
        if not isinstance(doc.get(key) or "", str):
            raise bad(f"'{key}' must be a string")
    if not isinstance(doc.get("wrapped_outputs", False), bool):
        raise bad("'wrapped_outputs' must be true or false")
    common = dict(prelude=doc.get("prelude") or "", starter=doc.get("starter") or "", time_limit_s=limit,
                  memory_mb=memory)  # fmt: skip
    if kind == "assert":
        if not isinstance(doc.get("check"), str) or not doc["check"].strip():
            raise bad("assert spec needs a non-empty 'check' string")
        if not (isinstance(doc.get("entry_point"), str) and doc["entry_point"].isidentifier()):
            raise bad("assert spec needs 'entry_point', a Python identifier (the name the check calls)")
        if not isinstance(doc.get("context", ""), str):
            raise bad("assert 'context' must be a string")
        return TestSpec("assert", [None], [None], entry_point=doc["entry_point"], check=doc["check"],
                        context=doc.get("context", ""), **common)  # fmt: skip
    tests = doc.get("tests")
    if not isinstance(tests, list) or not tests:
        raise bad(f"{kind} spec needs a non-empty 'tests' list")
    inputs, outputs = [], []
    for i, t in enumerate(tests):
        if not isinstance(t, dict) or "output" not in t:
            raise bad(f"test {i} needs an 'output'")
        if kind == "stdio":
            if not isinstance(t.get("input", ""), str) or not isinstance(t["output"], str):
                raise bad(f"test {i}: stdio 'input' and 'output' must be strings")
            inputs.append(t.get("input", ""))
        else:
            if not isinstance(t.get("args"), list):
                raise bad(f"test {i}: call 'args' must be a list")
            inputs.append(t["args"])
        outputs.append(t["output"])
    if kind == "call" and not (isinstance(doc.get("fn_name"), str) and doc["fn_name"].isidentifier()):
        raise bad("call spec needs 'fn_name', a Python identifier")
    return TestSpec(kind, inputs, outputs, fn_name=doc.get("fn_name"), checker=checker, include=include,
                    wrapped_outputs=kind == "call" and doc.get("wrapped_outputs", False), **common)  # fmt: skip


def tree_path(path: str) -> bool:
    """Whether ``path`` names a file inside a folder: 1 to 8 names of 1 to 100 characters, none ``.`` or ``..``."""
    names = path.split("/")
    return len(names) <= 8 and all(0 < len(n) <= 100 and n not in (".", "..") and "\0" not in n for n in names)


def positive_finite(x: Any) -> bool:
    """A number (not a bool) that is finite and above zero (any integer is finite, however long)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    return x > 0 and (isinstance(x, int) or math.isfinite(x))
