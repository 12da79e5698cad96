"""Tests as public code datasets store them, converted to bonforge's spec (``bonforge.judging.spec``).

Shapes (``fields.tests_format``; ``auto`` tells them apart by their keys):

``bonforge``       our own spec, ``{"kind": ...}``.
``apps``           APPS / TACO ``input_output``: ``{"inputs": [...], "outputs": [...], "fn_name"?}``. With a
                   function name (in the object or from ``fields.fn_name``) each input is an argument list and
                   the tests are call-based; else stdin/stdout (a list of lines counts as one text).
``codecontests``   CodeContests ``public_tests`` / ``private_tests`` / ``generated_tests``:
                   ``{"input": [...], "output": [...]}`` of stdin/stdout strings.
``livecodebench``  a list of ``{"input", "output", "testtype"}``; ``stdin`` tests are stdin/stdout,
                   ``functional`` tests hold one JSON argument per input line and a JSON output.
``assert``         HumanEval-style test code defining ``check(candidate)`` (called on the entry point), or
                   plain ``assert`` lines (one string or a list of them).

Any of them may come as a JSON string. Several fields (e.g. public and private tests) are joined in order.
Every value is untrusted: JSON strings are read by ``records.load_json`` (bounded depth, no
``RecursionError``), limits by patterns over at most 64 characters, and anything malformed is a
``DataError`` naming the field. Data is never unpickled: a pickled or zlib-compressed pickled value
(LiveCodeBench's private tests ship as base64 of that) is refused with an error saying so.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from dataclasses import dataclass, replace
from typing import Any

from bonforge.errors import DataError
from bonforge.tables.records import json_error, load_json
from bonforge.judging.spec import MAX_TIME_LIMIT_S, TestSpec, parse_spec, positive_finite

FORMATS = ("bonforge", "apps", "codecontests", "livecodebench", "assert")

# The imports the APPS evaluation harness puts before call-based solutions (numpy left out: not in the image).
APPS_PRELUDE = (
    "import sys\nimport time\nimport itertools\nfrom itertools import accumulate, product, permutations, combinations\n"
    "import collections\nfrom collections import Counter, OrderedDict, deque, defaultdict, ChainMap\n"
    "from functools import lru_cache\nimport math\n"
    "from math import sqrt, sin, cos, tan, ceil, fabs, floor, gcd, exp, log, log2\n"
    "import fractions\nfrom typing import List, Tuple\nimport random\nimport heapq\nfrom heapq import *\n"
)
# LiveCodeBench's starter code annotates with any typing name (Optional, Dict, ...).
LCB_PRELUDE = APPS_PRELUDE + "from typing import *\n"


@dataclass(frozen=True)
class Where:
    """The record being converted, for error messages."""

    source: str
    record: str

    def error(self, message: str, fld: str) -> DataError:
        return DataError(message, self.source, self.record, fld)


def to_spec(values: dict[str, Any], fmt: str, where: Where, *, fn_name: str | None = None,
            entry_point: str | None = None, starter: str = "", time_limit_s: float | None = None,
            memory_mb: float | None = None) -> TestSpec:
    """One spec from the test fields of a record (``{field name: value}``, joined in order). A ``bonforge``
    spec keeps every field it holds (checker, limits, context, ...); the starter and limits that the recipe's
    ``fields`` read beside the tests fill in what the spec leaves out, and one that says otherwise than the
    spec is the record's error (never a silent choice of one)."""
    parts = []
    for name, value in values.items():
        doc = decode(value, where, name)
        shape = fmt if fmt != "auto" else detect(doc, where, name)
        parts.append(_CONVERT[shape](doc, where, name, fn_name, entry_point))
    names = ", ".join(values)
    kinds = {t.kind for t in parts}
    if len(kinds) > 1:
        raise where.error(f"the fields hold different kinds of tests ({', '.join(sorted(kinds))})", names)
    spec = parts[0]
    if spec.kind == "assert":
        if len(parts) > 1:
            raise where.error("assert-style tests come from one field", names)
        if not (isinstance(spec.entry_point, str) and spec.entry_point.isidentifier()):
            raise where.error("assert-style tests need the function they test: set fields.entry_point", names)
    else:
        fns = {t.fn_name for t in parts}
        if len(fns) > 1:
            raise where.error(f"the fields name different functions ({', '.join(sorted(map(str, fns)))})", names)
        if len({t.wrapped_outputs for t in parts}) > 1:
            raise where.error("the fields compare returned values differently (APPS-style and strict)", names)
        for key in _SHARED:
            if any(getattr(t, key) != getattr(spec, key) for t in parts):
                raise where.error(f"the fields give different '{key}' values", names)
        spec = replace(spec, inputs=[i for t in parts for i in t.inputs], outputs=[o for t in parts for o in t.outputs])
        if not spec.inputs:
            raise where.error("empty test list", names)
    given = {"starter": starter or None, "time_limit_s": time_limit_s, "memory_mb": memory_mb,
             "entry_point": entry_point if spec.kind == "assert" else None}  # fmt: skip
    for key, value in given.items():
        own = getattr(spec, key) or None
        if value is not None and own is not None and value != own:
            raise where.error(f"the spec's '{key}' ({own!r:.60}) differs from the record's ({value!r:.60})", names)
    return replace(spec, **{k: v for k, v in given.items() if v is not None})


# What every joined field must say alike (beside the tests): the problem's, not a field's.
_SHARED = ("prelude", "starter", "context", "time_limit_s", "memory_mb", "checker")


def decode(value: Any, where: Where, name: str) -> Any:
    """A field's value as JSON data (JSON strings parsed); pickles are refused, never loaded."""
    if isinstance(value, (bytes, bytearray)):
        if _is_pickle(bytes(value)):
            raise where.error(_PICKLE, name)
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise where.error("binary data that is neither JSON nor text", name) from None
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text[:1] in ("{", "[", '"'):
        try:
            return load_json(text)
        except ValueError as e:
            raise where.error(json_error(e), name) from None
    if _is_pickle(text):
        raise where.error(_PICKLE, name)
    return value


_PICKLE = ("a pickled (or compressed pickled) value: bonforge never unpickles data; convert these tests to JSON "
           "with a tool you trust first")  # fmt: skip


def _is_pickle(data: str | bytes) -> bool:
    """Pickle protocol 2+ starts with 0x80; LiveCodeBench wraps it in zlib and base64."""
    raw = data if isinstance(data, bytes) else None
    if raw is None:
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return False
    if raw[:1] == b"\x80":
        return True
    try:
        return zlib.decompressobj().decompress(raw, 2)[:1] == b"\x80"
    except zlib.error:
        return False


def detect(doc: Any, where: Where, name: str) -> str:
    if isinstance(doc, dict):
        if "kind" in doc:
            return "bonforge"
        if "inputs" in doc or "outputs" in doc:
            return "apps"
        if "input" in doc or "output" in doc:
            return "codecontests"
    elif isinstance(doc, list):
        if not doc:
            raise where.error("empty test list", name)
        if all(isinstance(t, dict) for t in doc):
            return "livecodebench"
        if all(isinstance(t, str) and "assert" in t for t in doc):
            return "assert"
    elif isinstance(doc, str) and ("assert" in doc or _CHECK_DEF.search(doc)):
        return "assert"
    raise where.error(f"cannot tell the tests' shape ({type(doc).__name__}); name it in fields.tests_format "
                      f"({', '.join(FORMATS)})", name)  # fmt: skip


def _need_list(doc: dict, key: str, where: Where, name: str) -> list:
    value = doc.get(key)
    if not isinstance(value, list):
        raise where.error(f"'{key}' must be a list, got {type(value).__name__}", name)
    return value


def _paired(doc: Any, ins: str, outs: str, where: Where, name: str) -> tuple[list, list]:
    if not isinstance(doc, dict):
        raise where.error(f"expected an object with '{ins}' and '{outs}', got {type(doc).__name__}", name)
    inputs, outputs = _need_list(doc, ins, where, name), _need_list(doc, outs, where, name)
    if len(inputs) != len(outputs):
        raise where.error(f"{len(inputs)} inputs but {len(outputs)} outputs", name)
    return inputs, outputs


def _text(value: Any, what: str, i: int, where: Where, name: str, lines_ok: bool = False) -> str:
    if lines_ok and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    if not isinstance(value, str):
        raise where.error(f"test {i}: {what} must be a string, got {type(value).__name__}", name)
    return value


def _bonforge(doc, where, name, fn_name, entry_point) -> TestSpec:
    if not isinstance(doc, dict):
        raise where.error(f"expected a spec object, got {type(doc).__name__}", name)
    try:
        spec = parse_spec(json.dumps(doc), where.record)
    except (TypeError, ValueError) as e:  # DataError is a ValueError; bytes or dates from Parquet are not JSON
        raise where.error(e.message if isinstance(e, DataError) else f"not JSON data ({e})", name) from None
    return spec  # whole: its checker, limits and context are the problem's


def _apps(doc, where, name, fn_name, entry_point) -> TestSpec:
    inputs, outputs = _paired(doc, "inputs", "outputs", where, name)
    fn = doc.get("fn_name") or fn_name
    if fn:
        if not isinstance(fn, str) or not fn.isidentifier():
            raise where.error(f"fn_name must be a Python identifier, got {fn!r}", name)
        for i, args in enumerate(inputs):
            if not isinstance(args, list):
                raise where.error(f"test {i}: call arguments must be a list, got {type(args).__name__}", name)
        return TestSpec("call", list(inputs), list(outputs), fn, prelude=APPS_PRELUDE, wrapped_outputs=True)
    return TestSpec("stdio", [_text(v, "stdin", i, where, name, True) for i, v in enumerate(inputs)],
                    [_text(v, "expected stdout", i, where, name, True) for i, v in enumerate(outputs)])  # fmt: skip


def _codecontests(doc, where, name, fn_name, entry_point) -> TestSpec:
    inputs, outputs = _paired(doc, "input", "output", where, name)
    return TestSpec("stdio", [_text(v, "stdin", i, where, name) for i, v in enumerate(inputs)],
                    [_text(v, "expected stdout", i, where, name) for i, v in enumerate(outputs)])  # fmt: skip


def _livecodebench(doc, where, name, fn_name, entry_point) -> TestSpec:
    if not isinstance(doc, list) or not all(isinstance(t, dict) for t in doc):
        raise where.error("expected a list of {input, output, testtype} objects", name)
    types = {t.get("testtype", "stdin") if isinstance(t.get("testtype", "stdin"), str) else "?" for t in doc}
    if not types <= {"stdin", "functional"} or len(types) > 1:
        raise where.error(f"testtype must be all 'stdin' or all 'functional', got {sorted(map(str, types))}", name)
    inputs, outputs = [], []
    for i, t in enumerate(doc):
        if "input" not in t or "output" not in t:
            raise where.error(f"test {i} needs 'input' and 'output'", name)
        stdin, expected = _text(t["input"], "input", i, where, name), _text(t["output"], "output", i, where, name)
        if types == {"stdin"}:
            inputs.append(stdin)
            outputs.append(expected)
            continue
        try:
            inputs.append([load_json(line) for line in stdin.split("\n") if line.strip()])
            outputs.append(load_json(expected))
        except ValueError as e:
            raise where.error(f"test {i}: functional input and output must be JSON ({json_error(e)})", name) from None
    if types == {"functional"}:
        if not (isinstance(fn_name, str) and fn_name.isidentifier()):
            raise where.error("functional tests need the function's name: set fields.fn_name", name)
        return TestSpec("call", inputs, outputs, fn_name, prelude=LCB_PRELUDE)
    return TestSpec("stdio", inputs, outputs)


_CHECK_DEF = re.compile(r"^def\s+check\s*\(", re.M)


def _assert(doc, where, name, fn_name, entry_point) -> TestSpec:
    if isinstance(doc, list) and all(isinstance(line, str) for line in doc):
        doc = "\n".join(doc)
    code = doc
    if not isinstance(code, str) or not code.strip():
        raise where.error("assert-style tests must be non-empty code (a string or a list of strings)", name)
    if _CHECK_DEF.search(code):
        if not (isinstance(entry_point, str) and entry_point.isidentifier()):
            raise where.error("a check(candidate) test needs the entry point: set fields.entry_point", name)
        code = f"{code}\n\ncheck({entry_point})\n"
    return TestSpec("assert", [None], [None], entry_point=entry_point, check=code)


_CONVERT = {"bonforge": _bonforge, "apps": _apps, "codecontests": _codecontests, "livecodebench": _livecodebench,
            "assert": _assert}  # fmt: skip


# -- limits ------------------------------------------------------------------------------------------------
# Matched against the stripped text, at most _LIMIT_CHARS long: no pattern ever scans a long value (one
# with a run of blanks on each side of the unit once took quadratic time: 100 KB, 25 s).
_LIMIT_CHARS = 64
_TIME = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|secs?|seconds?)?", re.I)
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*(b|bytes?|k|kb|kib|kilobytes?|m|mb|mib|megabytes?|g|gb|gib|gigabytes?)?",
                     re.I)  # fmt: skip
_MB_PER = {"b": 1 / 2**20, "k": 1 / 1024, "m": 1, "g": 1024}
MAX_MEMORY_MB = float(2**20)  # 1 TiB: a larger limit from the data is capped to it (it is only recorded)


_UNKNOWN = ("", "none", "null", "n/a")  # how some tables (TACO) say "no limit given"


def _limit_text(value: str, pattern: re.Pattern, what: str, example: str, where: Where, name: str) -> re.Match:
    text = value.strip()
    m = pattern.fullmatch(text) if len(text) <= _LIMIT_CHARS else None
    if not m:
        raise where.error(f"not a {what}: {value!r:.100} ({example})", name)
    return m


def _number(value: Any, what: str, where: Where, name: str, cap: float) -> float | None:
    """A limit given as a number, at most ``cap``: None for null or zero (no limit from the data); NaN, an
    infinity, a negative number or a non-number is the record's error."""
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0):
        return None
    if not positive_finite(value):
        raise where.error(f"not a {what}: {value!r:.100} (a finite positive number)", name)
    return float(min(value, cap))


def time_limit_s(value: Any, where: Where, name: str) -> float | None:
    """Seconds from a number, ``"2 seconds"`` / ``"500 ms"``, or CodeContests' ``{seconds, nanos}``;
    null, zero or ``"None"`` (unknown in some rows) means no limit from the data. A limit over
    ``MAX_TIME_LIMIT_S`` is capped to it (no problem's data may ask for more than a recipe may)."""
    if isinstance(value, str) and value.strip().lower() in _UNKNOWN:
        return None
    if isinstance(value, dict):
        secs = _number(value.get("seconds") or 0, "time limit's seconds", where, name, MAX_TIME_LIMIT_S) or 0.0
        nanos = _number(value.get("nanos") or 0, "time limit's nanos", where, name, 1e9) or 0.0
        value = secs + nanos / 1e9
    elif isinstance(value, str):
        m = _limit_text(value, _TIME, "time limit", "a number of seconds, '2 seconds', '500 ms'", where, name)
        value = float(m.group(1)) / (1000 if (m.group(2) or "s").lower().startswith("m") else 1)
    return _number(value, "time limit", where, name, MAX_TIME_LIMIT_S)


def memory_limit_mb(value: Any, where: Where, name: str) -> float | None:
    """MiB from ``"256 megabytes"`` / ``"1 GB"`` / a number (MiB, or bytes when the field's name ends in
    ``_bytes`` as CodeContests' ``memory_limit_bytes`` does); null, zero or ``"None"`` means none from the data."""
    if isinstance(value, str) and value.strip().lower() in _UNKNOWN:
        return None
    if isinstance(value, str):
        m = _limit_text(value, _MEMORY, "memory limit", "e.g. '256 megabytes', '1 GB'", where, name)
        return min(float(m.group(1)) * _MB_PER[(m.group(2) or "m")[0].lower()], MAX_MEMORY_MB) or None
    per_mb = 2**20 if name.endswith("_bytes") else 1
    mb = _number(value, "memory limit", where, name, MAX_MEMORY_MB * per_mb)
    return None if mb is None else mb / per_mb
