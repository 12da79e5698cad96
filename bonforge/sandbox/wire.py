"""The typed wire between the host and the runner: a test's closed set of statuses, the request
(``Request``, its native ``Build``, its ``Limits``) and the answer (``Answer``, one ``Result`` per test run).
Standard library only: the runner (in the image beside ``runner.py``) reads each request line with
``Request.read`` and answers with ``Answer``; the host (``pool.py``) checks its requests the same way before it
sends them and reads each answer back with ``Answer.read`` (``worker.py``). Each is checked once, where it is
read, field by field: a field out of shape is a ``WireError`` naming it, never a ``KeyError`` deep inside.

A request (host -> runner, one JSON line; what each field does: ``runner.py``'s docstring) carries one
candidate with all its test inputs; the answer carries one result per test run, each with a ``Status``. The
runner never sees an expected output: the host judges (``bonforge.judging``).
"""

import dataclasses
import enum
import math


class Status(enum.StrEnum):
    """What one test's run did, as the runner reports it: a closed set (anything else on the wire is a
    broken runner, never a verdict). ``str`` values: they travel as themselves in JSON."""

    OK = "ok"
    RUNTIME_ERROR = "runtime_error"
    COMPILE_ERROR = "compile_error"
    TIMEOUT = "timeout"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    UNFINISHED = "unfinished"  # the machine, not the program, kept it from finishing (``LOAD_STRETCH``)


STATUSES = frozenset(s.value for s in Status)


def not_run(status, error, wall_s=0.0):
    """A test's result when nothing of its run is known but ``status`` and ``error`` (it did not run, its build
    failed, or its runner did not answer): the same fields from the runner and from the host."""
    return Result(status, error=error, wall_s=wall_s).doc()
WALL_SLACK_S = 1.0  # a run's wall limit beyond its CPU limit times the wall factor (start-up, input, output)
# A test's wall limit counts the program's own time: its wall time less the time its processes waited for a
# CPU (run-queue delay; a busy machine's). That wait may stretch a test to at most this many times its wall
# limit (a request's budget likewise); past it the test is UNFINISHED: the machine's outcome, not a verdict.
LOAD_STRETCH = 10.0
# A request run again alone (one at a time, after every other: ``judging.code``, ``testlib.Checkers``) carries a
# larger ``stretch``: each rerun RERUN_GROWTH times the last, until a test's allowance reaches ALONE_WALL_S of
# real time (never below the first pass's); still unfinished there, the machine's outcome is final.
RERUN_GROWTH = 4.0
ALONE_WALL_S = 600.0


def rerun_stretches(wall_limit):
    """The stretches of the runs alone, in order, of a request whose tests' wall limit is ``wall_limit``: the
    last one's allowance is ``ALONE_WALL_S`` a test, or ``LOAD_STRETCH`` times the wall limit when that is more."""
    top = max(LOAD_STRETCH, ALONE_WALL_S / float(wall_limit))
    stretches = [min(LOAD_STRETCH * RERUN_GROWTH, top)]
    while stretches[-1] < top:
        stretches.append(min(stretches[-1] * RERUN_GROWTH, top))
    return stretches


def wall_limit(cpu_s, wall_factor, slack=WALL_SLACK_S):
    """The wall-clock limit of a run whose CPU limit is ``cpu_s`` (a test's, a build's, a checker's, a probe's
    with its own ``slack``): the one formula for it."""
    return float(cpu_s) * float(wall_factor) + slack


@dataclasses.dataclass(frozen=True)
class Limits:
    """A run's limits as a request carries them (a request's tests, or its ``build``): CPU seconds, the wall
    limit that follows from them (``wall_limit``), memory and output caps."""

    time_limit: float
    wall_factor: float
    memory_mb: int
    output_limit: int

    @property
    def wall_limit(self):
        return wall_limit(self.time_limit, self.wall_factor)

    def fields(self):
        """The request's fields for these limits."""
        return {"time_limit": self.time_limit, "wall_limit": self.wall_limit, "memory_mb": self.memory_mb,
                "output_limit": self.output_limit}
KINDS = ("stdio", "call", "assert")  # how a program is fed its tests (``runner.py``'s docstring)


class WireError(ValueError):
    """A request or an answer out of shape; the message names the field."""


def _shown(value):
    """``value`` for a message: its first 80 characters."""
    try:
        text = repr(value)
    except ValueError:  # an integer past repr's 4,300 digits
        return "an integer too long to show"
    return text if len(text) <= 80 else text[:80] + "..."


def _int(v):
    """A JSON integer that is a float's too (within 2^53): never one whose use would overflow."""
    return type(v) is int and abs(v) <= 1 << 53


def _number(v):
    """A JSON number the host and the runner can both use as a float: finite."""
    return type(v) is float and math.isfinite(v) or _int(v)


def _strings(v):
    return type(v) is list and all(type(s) is str for s in v)


def _file(f):
    return (type(f) is dict and type(f.get("name")) is str
            and (set(f) == {"name", "text"} and type(f["text"]) is str
                 or set(f) <= {"name", "b64", "executable"} and type(f.get("b64")) is str
                 and type(f.get("executable", False)) is bool))  # fmt: skip


_TEST_FIELDS = {"input": lambda v: type(v) is str, "args": lambda v: type(v) is list,
                "calls": lambda v: type(v) is list, "go_on": lambda v: type(v) is bool,
                "files": lambda v: type(v) is list and all(map(_file, v))}  # fmt: skip


def _tests(v):
    return type(v) is list and all(type(t) is dict and all(k in _TEST_FIELDS and _TEST_FIELDS[k](x)
                                                           for k, x in t.items()) for t in v)  # fmt: skip


def _optional(test):
    return lambda v: v is None or test(v)


# What each field of a request, a build, an answer or a result must be: (test, its words).
_SECONDS = (lambda v: _number(v) and v > 0, "a positive number of seconds")
_COUNT = (lambda v: _int(v) and v > 0, "a positive integer")
_TEXT = (lambda v: type(v) is str, "a string")
_FLAG = (lambda v: type(v) is bool, "true or false")
_RULES = {
    "id": (lambda v: type(v) is str or _int(v), "a string or an integer"),
    "kind": (lambda v: type(v) is str and v in KINDS, f"one of {', '.join(KINDS)}"),
    "tests": (_tests, "a list of tests ({input | args | calls, go_on, files})"),
    "time_limit": _SECONDS, "wall_limit": _SECONDS, "memory_mb": _COUNT, "output_limit": _COUNT,
    "program": _TEXT, "prelude": _TEXT, "fn_name": (_optional(lambda v: type(v) is str), "a string or null"),
    "budget": (_optional(_number), "a number of seconds or null"), "stop_on_failure": _FLAG,
    "stretch": (_optional(lambda v: _number(v) and v >= 1), "a number >= 1 or null"),
    "stop_on_timeout": _FLAG,
    "file_limit": (_optional(_COUNT[0]), "a positive integer or null"),
    "files": (lambda v: type(v) is list and all(map(_file, v)), "a list of files ({name, text | b64, executable})"),
    "exec": (_optional(lambda v: _strings(v) and v != []), "a non-empty list of strings or null"),
    "address_limit": _FLAG, "argv": (lambda v: _strings(v) and v != [], "a non-empty list of strings"),
    "keep": (_optional(lambda v: type(v) is str), "a file name or null"),
    "status": (lambda v: isinstance(v, str) and v in STATUSES, "a status of the wire"),  # (a Status is a str)
    "stdout": _TEXT, "stderr": _TEXT,
    "error": (_optional(lambda v: type(v) is str), "a string"),
    "cpu_s": (_number, "a number"), "wall_s": (_number, "a number"), "wait_s": (_number, "a number"),
    "exit_code": (_optional(_int), "an integer or null"),
    "value": (_optional(lambda v: type(v) is str), "a string or null"),
    "calls": (_optional(_strings), "a list of strings or null"), "clean": _FLAG, "cleanup": _TEXT,
    "artifact": (_optional(lambda v: type(v) is str), "a string or null"),
    "build_error": (_optional(lambda v: type(v) is str), "a string or null"), "unfinished": _FLAG,
    "build": (lambda v: v is None or isinstance(v, Build), "a build ({argv, limits}) or null"),
    "results": (lambda v: type(v) is list and all(isinstance(r, Result) for r in v), "a list of results"),
}  # fmt: skip


class _Shape:
    """A wire record: its fields checked against ``_RULES`` when made; ``read`` from JSON, ``doc`` to JSON."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            test, words = _RULES[f.name]
            if not test(value):
                raise WireError(f"{self._what} field {f.name!r}: expected {words}, got {_shown(value)}")

    @classmethod
    def read(cls, doc, what=None):
        """``doc`` (parsed JSON) as this record; ``WireError`` naming the field out of shape."""
        what = what or cls._what
        if type(doc) is not dict:
            raise WireError(f"{what}: expected an object, got {_shown(doc)}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = [k for k in doc if k not in names]
        if unknown:
            raise WireError(f"{what}: unknown field {_shown(unknown[0])}")
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in doc
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]  # fmt: skip
        if missing:
            raise WireError(f"{what}: field {missing[0]!r} is missing")
        try:
            return cls(**cls._nested(doc))
        except WireError as e:
            raise WireError(str(e).replace(cls._what, what, 1)) from None

    @classmethod
    def _nested(cls, doc):
        return doc

    def doc(self):
        """The JSON object (fields that are None left out)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = value.doc() if isinstance(value, _Shape) else value
        return out


@dataclasses.dataclass(frozen=True)
class Build(_Shape):
    """A native program's build, run once before its tests (``runner.py``): the compiler's argv, its limits, and
    the file to send back (``keep``)."""

    _what = "the request's build"
    argv: list
    time_limit: float
    wall_limit: float
    memory_mb: int
    output_limit: int
    keep: str | None = None
    file_limit: int | None = None


@dataclasses.dataclass(frozen=True)
class Request(_Shape):
    """One candidate's request, host -> runner (what each field does: ``runner.py``'s docstring)."""

    _what = "request"
    id: str | int
    kind: str
    tests: list
    time_limit: float
    wall_limit: float
    memory_mb: int
    output_limit: int
    program: str = ""
    prelude: str = ""
    fn_name: str | None = None
    budget: float | None = None
    stretch: float | None = None  # a run alone's (``rerun_stretches``); null: ``LOAD_STRETCH``
    stop_on_failure: bool = False
    stop_on_timeout: bool = False
    file_limit: int | None = None
    files: list = dataclasses.field(default_factory=list)
    build: Build | None = None
    exec: list | None = None
    address_limit: bool = True

    @classmethod
    def _nested(cls, doc):
        build = doc.get("build")
        return dict(doc, build=Build.read(build)) if build is not None else doc


@dataclasses.dataclass(frozen=True)
class Result(_Shape):
    """One test's run, runner -> host: its ``Status``, capped streams, CPU and wall seconds (``wait_s``: the part
    of the wall its processes waited for a CPU), a native program's ``exit_code``, a call's returned ``value``
    (tagged JSON text) and an assert-style run's ``calls`` lines (``runner.py``'s docstring)."""

    _what = "result"
    status: str
    stdout: str = ""
    stderr: str = ""
    error: str = ""
    cpu_s: float = 0.0
    wall_s: float = 0.0
    wait_s: float = 0.0
    exit_code: int | None = None
    value: str | None = None
    calls: list | None = None


@dataclasses.dataclass(frozen=True)
class Answer(_Shape):
    """The runner's answer to one request: a result per test run, whether it cleaned up (``clean``: else the
    host replaces it), a build's ``artifact`` or ``build_error``, ``unfinished`` when the machine kept the build
    from finishing; or only ``error``, a runner fault."""

    _what = "answer"
    id: str | int
    results: list = dataclasses.field(default_factory=list)
    clean: bool = False
    cleanup: str = ""
    artifact: str | None = None
    build_error: str | None = None
    unfinished: bool = False
    error: str | None = None

    @classmethod
    def _nested(cls, doc):
        results = doc.get("results", [])
        if type(results) is not list:
            raise WireError(f"answer field 'results': expected a list of results, got {_shown(results)}")
        return dict(doc, results=[Result.read(r, f"result {i}") for i, r in enumerate(results)])

    def doc(self):
        out = super().doc()
        out["results"] = [r.doc() for r in self.results]
        return out

    @classmethod
    def of(cls, doc, request):
        """A runner's parsed answer line as the answer to ``request`` (a ``Request``): its shape, its id, a
        result per test at most, the calls of an assert-style run; ``WireError`` saying what is off."""
        if type(doc) is not dict or doc.get("id") != request.id:
            raise WireError(f"an answer that is not for request {request.id!r}: {_shown(doc)}")
        if "error" in doc:  # a runner fault: its message only
            if type(doc["error"]) is not str:
                raise WireError(f"garbled fault report: {_shown(doc['error'])}")
            return cls(request.id, error=doc["error"])
        if "clean" not in doc:
            raise WireError("answer: field 'clean' is missing")
        answer = cls.read(doc)
        if len(answer.results) > len(request.tests):
            raise WireError(f"answer: {len(answer.results)} results for {len(request.tests)} tests")
        for i, res in enumerate(answer.results):
            if request.kind == "assert" and res.status != Status.COMPILE_ERROR and res.calls is None:
                raise WireError(f"result {i}: an assert-style run without its 'calls'")
        return answer


def max_answer_bytes(request):
    """The most a runner's answer to ``request`` (a ``Request``) may take on the channel: per test, stdout and
    call lines (``output_limit`` together, at most 6 bytes each once JSON-escaped), a stderr tail, small fields."""
    size = len(request.tests) * (6 * (request.output_limit + 4096) + 4096) + 65536
    if request.build is not None:  # the compiler's message, and the kept file in base64
        size += 6 * 4096 + (4 * request.build.output_limit // 3 + 8 if request.build.keep else 0)
    return size
