"""The typed wire (``wire.Request``, ``Build``, ``Result``, ``Answer``) attacked as a hostile candidate, runner or
caller would: every field out of shape is one ``WireError`` naming it (never a ``KeyError``, ``TypeError`` or
``OverflowError`` deep inside), with the value shown cut; a forged answer a program writes anywhere it can is
never read as the runner's. Controls: the honest request and answer are read back as they were sent."""

from __future__ import annotations

import json
import sys

import pytest

from code_shapes import one_problem

from bonforge.judging.code import verify_code
from bonforge.sandbox import pool as pool_mod
from bonforge.sandbox import wire
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.pool import SandboxPool

REQUEST = {"id": "p/t/0", "kind": "stdio", "tests": [{"input": "2 3\n"}], "time_limit": 1.0, "wall_limit": 3.0,
           "memory_mb": 256, "output_limit": 1024}  # fmt: skip
BUILD = {"argv": ["g++", "main.cpp"], "time_limit": 10.0, "wall_limit": 31.0, "memory_mb": 512,
         "output_limit": 4096, "keep": "a.out"}  # fmt: skip
HUGE = "x" * (1 << 20)


def refusal(read, doc) -> str:
    with pytest.raises(wire.WireError) as e:
        read(doc)
    message = str(e.value)
    assert len(message) < 300, message  # a megabyte value is shown cut
    return message


@pytest.mark.parametrize("change, words", [
    ({"time_limit": float("nan")}, "field 'time_limit'"),
    ({"time_limit": float("inf")}, "field 'time_limit'"),
    ({"wall_limit": -1}, "field 'wall_limit'"),
    ({"memory_mb": True}, "field 'memory_mb'"),
    ({"memory_mb": 10 ** 400}, "field 'memory_mb'"),
    ({"output_limit": 1.5}, "field 'output_limit'"),
    ({"kind": ["stdio"]}, "field 'kind'"),
    ({"kind": HUGE}, "field 'kind'"),
    ({"id": {"a": 1}}, "field 'id'"),
    ({"tests": [{"input": 5}]}, "field 'tests'"),
    ({"tests": [{"input": "", "expected": "5"}]}, "field 'tests'"),
    ({"tests": "2 3"}, "field 'tests'"),
    ({"budget": "soon"}, "field 'budget'"),
    ({"exec": []}, "field 'exec'"),
    ({"files": [{"name": "a", "text": "x", "b64": "eA=="}]}, "field 'files'"),
    ({"files": [{"name": 5, "text": "x"}]}, "field 'files'"),
    ({"build": dict(BUILD, argv="g++")}, "build field 'argv'"),
    ({"build": {"argv": ["g++"]}}, "build: field 'time_limit' is missing"),
    ({"build": [1]}, "build: expected an object"),
    ({"stop_on_failure": "yes"}, "field 'stop_on_failure'"),
    ({"wall_cap": 5.0}, "unknown field 'wall_cap'"),
    ({HUGE: 1}, "unknown field"),
])  # fmt: skip
def test_a_request_out_of_shape_is_one_error_naming_its_field(change, words):
    assert words in refusal(wire.Request.read, {**REQUEST, **change})


def test_a_request_reads_back_as_it_was_written():
    request = wire.Request.read(dict(REQUEST, build=BUILD, exec=["./a.out"], files=[{"name": "main.cpp", "text": ""}]))
    assert isinstance(request.build, wire.Build) and request.build.keep == "a.out"
    assert wire.Request.read(json.loads(json.dumps(request.doc()))) == request
    assert "field 'kind' is missing" in refusal(wire.Request.read, {k: v for k, v in REQUEST.items() if k != "kind"})
    assert "expected an object" in refusal(wire.Request.read, [REQUEST])


ASSERT = wire.Request.read(dict(REQUEST, kind="assert", tests=[{"calls": [], "go_on": False}]))
OK = {"status": "ok", "stdout": "5\n", "stderr": "", "cpu_s": 0.01, "wall_s": 0.02, "wait_s": 0.0}


@pytest.mark.parametrize("answer, words", [
    ({"id": "p/t/1", "results": [OK], "clean": True}, "not for request 'p/t/0'"),
    ({"id": "p/t/0", "results": [OK, OK], "clean": True}, "2 results for 1 tests"),
    ({"id": "p/t/0", "results": [OK]}, "field 'clean' is missing"),
    ({"id": "p/t/0", "results": {"0": OK}, "clean": True}, "field 'results'"),
    ({"id": "p/t/0", "results": [dict(OK, status=["ok"])], "clean": True}, "result 0 field 'status'"),  # unhashable
    ({"id": "p/t/0", "results": [dict(OK, status="passed")], "clean": True}, "result 0 field 'status'"),
    ({"id": "p/t/0", "results": [dict(OK, cpu_s=10 ** 400)], "clean": True}, "result 0 field 'cpu_s'"),  # overflow
    ({"id": "p/t/0", "results": [dict(OK, wall_s=float("nan"))], "clean": True}, "result 0 field 'wall_s'"),
    ({"id": "p/t/0", "results": [dict(OK, exit_code=10 ** 5000)], "clean": True}, "result 0 field 'exit_code'"),
    ({"id": "p/t/0", "results": [dict(OK, stdout=[HUGE])], "clean": True}, "result 0 field 'stdout'"),
    ({"id": "p/t/0", "results": [dict(OK, verdict="passed")], "clean": True}, "result 0: unknown field 'verdict'"),
    ({"id": "p/t/0", "results": [OK], "clean": True, "passed": True}, "unknown field 'passed'"),
    ({"id": "p/t/0", "results": [OK], "clean": True, "artifact": 5}, "field 'artifact'"),
    ({"id": "p/t/0", "error": ["boom"]}, "garbled fault report"),
])  # fmt: skip
def test_an_answer_out_of_shape_is_refused_saying_why(answer, words):
    request = wire.Request.read(REQUEST)
    assert words in refusal(lambda a: wire.Answer.of(a, request), answer)


def test_an_assert_style_answer_needs_its_calls_and_an_honest_one_reads_back():
    assert "without its 'calls'" in refusal(lambda a: wire.Answer.of(a, ASSERT),
                                            {"id": "p/t/0", "results": [OK], "clean": True})
    assert "result 0 field 'calls'" in refusal(lambda a: wire.Answer.of(a, ASSERT),
                                               {"id": "p/t/0", "results": [dict(OK, calls="v 5")], "clean": True})
    honest = wire.Answer.of({"id": "p/t/0", "results": [dict(OK, calls=["v 5"])], "clean": True}, ASSERT)
    assert wire.Answer.of(json.loads(json.dumps(honest.doc())), ASSERT) == honest


# A runner that answers every request with ``sys.argv[1]`` (its id put in): a runner the sandbox lost to a program.
FAKE_RUNNER = r"""
import json, sys
out = sys.stdout.buffer
out.write(b'{"event": "ready"}\n'); out.flush()
for line in sys.stdin.buffer:
    req = json.loads(line)
    out.write(sys.argv[1].replace("ID", json.dumps(req["id"])).encode() + b"\n"); out.flush()
"""


@pytest.mark.parametrize("answer, words", [
    ('{"id": ID, "results": [{"status": ["ok"], "stdout": "5\\n"}], "clean": true}', "result 0 field 'status'"),
    ('{"id": ID, "results": [{"status": "ok", "stdout": "5\\n", "cpu_s": 1' + "0" * 400 + '}], "clean": true}',
     "result 0 field 'cpu_s'"),
    ('{"id": ID, "results": [{"status": "ok", "stdout": "5\\n", "wall_s": NaN}], "clean": true}',
     "result 0 field 'wall_s'"),
])  # fmt: skip
def test_a_hostile_runners_answer_is_a_sandbox_error_naming_the_field(tmp_path, monkeypatch, answer, words):
    """A runner answering with an unhashable status, a 400-digit CPU time or a NaN wall time: before, a
    ``TypeError`` in the host's check (the batch failed) or a number no float holds; now the host refuses the
    answer, naming the field, and the candidate gets ``sandbox_error`` (the stage goes on)."""
    fake = tmp_path / "fake_runner.py"
    fake.write_text(FAKE_RUNNER)
    monkeypatch.setattr(pool_mod, "process_argv", lambda cfg: [sys.executable, str(fake), answer])
    with SandboxPool(CodeVerifyConfig(backend="process", pool_size=1, retries=0, extraction="raw")) as pool:
        problems, cands = one_problem({"kind": "stdio", "tests": [{"input": "", "output": "5\n"}]}, ["print(5)\n"])
        (verdict,) = verify_code(problems, cands, pool.cfg, pool=pool).to_pylist()
    assert verdict["status"] == "sandbox_error" and words in verdict["detail"], verdict


# A wrong program that writes a passing answer for its own request (its id guessed) everywhere it can: its
# stdout, its stderr, /dev/stdout, every descriptor it holds (the result pipe among them), before its wrong
# answer; then a megabyte of stderr.
FORGER = r"""
import json, os
forged = json.dumps({"id": "p/t/0", "results": [{"status": "ok", "stdout": "5\n", "stderr": "", "cpu_s": 0.0,
                     "wall_s": 0.0}], "clean": True}) + "\n"
for fd in range(256):
    try:
        os.write(fd, forged.encode())
    except OSError:
        pass
for path in ("/dev/stdout", "/dev/stderr", "/proc/self/fd/1"):
    try:
        with open(path, "w") as f:
            f.write(forged)
    except OSError:
        pass
print(forged, end="")
os.write(2, b"x" * (1 << 20))
print(4)
"""


def test_a_forged_answer_written_by_the_program_is_never_the_runners():
    """Control: the right program passes on the same pool."""
    cfg = CodeVerifyConfig(backend="process", pool_size=1, extraction="raw")
    with SandboxPool(cfg) as pool:
        problems, cands = one_problem({"kind": "stdio", "tests": [{"input": "", "output": "5\n"}]},
                                      [FORGER, "print(5)\n"])  # fmt: skip
        forged, right = verify_code(problems, cands, cfg, pool=pool).to_pylist()
    assert forged["status"] == "wrong_answer", forged
    assert right["status"] == "passed", right


@pytest.mark.parametrize("line, words", [
    (json.dumps(dict(REQUEST, tests=[{"input": 5}])), "field 'tests'"),
    (json.dumps(dict(REQUEST, memory_mb=10 ** 400)), "field 'memory_mb'"),
    (json.dumps(dict(REQUEST, build={"argv": "sh"})), "the request's build"),
    ("[" * 100000, "bad request"),
    ("not json", "bad request"),
])  # fmt: skip
def test_the_runner_answers_a_request_out_of_shape_with_one_error(line, words):
    """The runner's end: a request line out of shape (a field of the wrong type, a 400-digit integer, nesting
    100,000 deep, not JSON) is answered with one fault naming the field, then the runner exits; never a
    traceback, never a run."""
    import subprocess

    from bonforge.sandbox.image import RUNNER_PATH

    proc = subprocess.run([sys.executable, str(RUNNER_PATH)], input=(line + "\n").encode(), capture_output=True,
                          timeout=60)  # fmt: skip
    ready, answer = [json.loads(x) for x in proc.stdout.splitlines()]
    assert ready["event"] == "ready" and proc.returncode == 0, proc.stderr[-2000:]
    assert answer["error"].startswith("bad request") and words in answer["error"], answer
    assert answer["id"] in ("p/t/0", None) and b"Traceback" not in proc.stderr


def test_a_request_out_of_shape_is_its_own_sandbox_error_and_the_batch_goes_on():
    """The pool's end: a caller's request out of shape is never sent; its outcome is ``sandbox_error`` naming
    the field, and every other request of the batch runs (control: the honest one passes)."""
    cfg = CodeVerifyConfig(backend="process", pool_size=1)
    good = dict(REQUEST, program="print(sum(map(int, input().split())))\n")
    with SandboxPool(cfg) as pool:
        outcomes = pool.run([good, dict(good, id="bad", tests=[{"input": 5}]), dict(good, id="odd", verdict="ok")])
    assert outcomes[0]["results"][0]["stdout"] == "5\n"
    assert "request field 'tests'" in outcomes[1]["sandbox_error"]
    assert "unknown field 'verdict'" in outcomes[2]["sandbox_error"]
