"""The typed wire between the host and the runner: the closed set of a test's statuses, the request kinds,
and the check of a runner's answer. Standard library only: the runner (in the image beside ``runner.py``)
answers in these terms, the host (``worker.py``) reads them back through ``answer_problem``.

A request (host -> runner, one JSON line; fields in ``runner.py``'s docstring) carries one candidate with all
its test inputs; the answer carries one result per test run, each with a ``Status``. The runner never sees an
expected output: the host judges (``bonforge.judging``).
"""

import dataclasses
import enum


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
    return {"status": status, "error": error, "stdout": "", "stderr": "", "cpu_s": 0.0, "wall_s": wall_s}
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


def max_answer_bytes(request):
    """The most a runner's answer to ``request`` may take on the channel: per test, stdout and call lines
    (``output_limit`` together, at most 6 bytes each once JSON-escaped), a stderr tail, small fields."""
    size = len(request["tests"]) * (6 * (int(request["output_limit"]) + 4096) + 4096) + 65536
    build = request.get("build")
    if isinstance(build, dict):  # the compiler's message, and the kept file in base64
        size += 6 * 4096 + (4 * int(build["output_limit"]) // 3 + 8 if build.get("keep") else 0)
    return size


def _result_ok(res, request):
    return (isinstance(res, dict) and res.get("status") in STATUSES
            and all(isinstance(res.get(k, ""), str) for k in ("stdout", "stderr", "error", "value"))
            and all(isinstance(res.get(k), (int, float)) and not isinstance(res.get(k), bool)
                    for k in ("cpu_s", "wall_s"))
            and isinstance(res.get("wait_s", 0.0), (int, float)) and not isinstance(res.get("wait_s"), bool)
            and (type(res.get("exit_code", 0)) is int)
            and (request["kind"] != "assert" or res["status"] == Status.COMPILE_ERROR
                 or isinstance(res.get("calls"), list) and all(isinstance(c, str) for c in res["calls"])))  # fmt: skip


def answer_problem(answer, request, line=b""):
    """What is wrong with ``answer`` (a runner's parsed answer line) as the answer to ``request``, or None.
    The runner is inside the sandbox: its answer is checked field by field, never trusted."""
    if not isinstance(answer, dict) or answer.get("id") != request["id"]:
        return f"an answer that is not for request {request['id']!r}: {line[:200]!r}"
    if "error" in answer:
        return None if isinstance(answer["error"], str) else "garbled fault report"
    results = answer.get("results")
    if not (isinstance(results, list) and len(results) <= len(request["tests"])
            and isinstance(answer.get("clean"), bool)):  # fmt: skip
        return f"malformed answer {line[:200]!r}"
    if not (isinstance(answer.get("artifact", ""), str) and isinstance(answer.get("build_error", ""), str)
            and isinstance(answer.get("unfinished", False), bool)):  # fmt: skip
        return "garbled build artifact or message"
    if not all(_result_ok(res, request) for res in results):
        return f"malformed result in answer {line[:200]!r}"
    return None
