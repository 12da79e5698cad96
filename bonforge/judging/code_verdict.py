"""The code judge's verdicts (``judging.code``): each outcome the sandbox sends back, reduced as it arrives to
what its verdict needs (``judged``: outputs compared with the expected ones, returned values rebuilt with
bounded depth), then the candidate's verdict (``verdict``: the first failing test's status, the tests passed,
a detail; a test that says nothing about the candidate gives ``sandbox_error`` or ``infra_error`` only when
no other failed)."""

from __future__ import annotations

import json
import logging

from bonforge.judging.compare import tokens_match, value_matches
from bonforge.judging.spec import TestSpec
from bonforge.sandbox.codec import decode_value
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.testlib import PROBLEM_ERROR
from bonforge.sandbox.wire import Result, Status

log = logging.getLogger("bonforge.sandbox")

# A test's outcome that says nothing about the candidate, and the verdict it gives when no other test failed:
# the problem's checker failed, or the machine kept the run from finishing (even run again alone).
UNKNOWN = {PROBLEM_ERROR: "sandbox_error", Status.UNFINISHED: "infra_error"}


def clip(text: str, n: int) -> str:
    text = text.encode("utf-8", "replace").decode()  # a program's exception text may hold lone surrogates
    return text if len(text) <= n else text[: n // 2] + "\n...\n" + text[-(n - n // 2) :]


_JSON_KEYS = {True: "true", False: "false", None: "null"}


def _as_json(value):
    """A returned value as its JSON round trip would give it (tuples become lists, dict keys strings);
    ``ValueError`` for what JSON cannot hold (sets, bytes, objects)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_as_json(v) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k is None or isinstance(k, bool):
                k = _JSON_KEYS[k]
            elif isinstance(k, (int, float)):
                k = repr(k)
            elif not isinstance(k, str):
                raise ValueError(f"a dict key of type {type(k).__name__}")
            out[k] = _as_json(v)
        return out
    raise ValueError(f"a value of type {type(value).__name__}")


def _show(value) -> str:
    try:
        return repr(value)[:200]
    except ValueError:  # an integer past the 4,300-digit limit of repr
        return "a value too long to show"


def returned_value(text: str):
    """The value a call-based program returned, rebuilt on the host from the runner's tagged text with
    bounded depth; ``ValueError`` when it cannot be read or is not JSON data."""
    try:
        return _as_json(decode_value(json.loads(text)))
    except (RecursionError, MemoryError, TypeError, OverflowError) as e:
        raise ValueError(f"unreadable ({type(e).__name__})") from None


def judge_outcome(spec: TestSpec, outcome: dict, cfg: CodeVerifyConfig) -> tuple[str, int, int, str]:
    """(status, tests_passed, tests_total, detail) for one candidate's pool outcome (its checks replayed)."""
    return verdict(spec, judged(spec, outcome, cfg), cfg)


def _tail(text: str, n: int) -> str:
    return text[max(len(text) - n, 0) :]


def judged(spec: TestSpec, outcome: dict, cfg: CodeVerifyConfig) -> dict:
    """A pool outcome reduced to what its verdict needs, judged as it arrives (a batch never holds every
    program's output): per test its status (``passed``, ``wrong_answer`` or the run's own), a note, a stderr
    tail and its wall time; an assert-style run keeps its call lines until its check is replayed, which
    ``_Replays`` does as the outcome arrives. An outcome that cannot be judged at all (a bug here, met by no
    program so far) is that candidate's runtime_error."""
    try:
        return _judged(spec, outcome, cfg)
    except Exception as e:  # noqa: BLE001
        log.warning("could not judge an outcome (%s: %s): the candidate gets runtime_error", type(e).__name__, e)
        return {"runner_killed": f"the outcome could not be judged: {type(e).__name__}: {e}"}


def _judged(spec: TestSpec, outcome: dict, cfg: CodeVerifyConfig) -> dict:
    if "results" not in outcome:
        return {k: outcome[k] for k in ("sandbox_error", "runner_killed", "latency_s") if k in outcome}
    results = []
    for i, doc in enumerate(outcome["results"]):
        res = Result.read(doc, f"result {i}")  # the wire's record (checked there already: a pool's or a fake's)
        status, note = res.status, res.error or ""
        stderr = _tail(res.stderr, cfg.detail_chars)
        if status == "ok" and spec.checker is not None:  # judged by the problem's checker program (later)
            results.append({"status": "ok", "error": "", "stdout": res.stdout, "stderr": stderr, "wall_s": res.wall_s})
            continue
        if status == "ok" and spec.kind == "stdio":
            ok = tokens_match(res.stdout, spec.outputs[i], cfg.float_tolerance, cfg.case_insensitive)
            note = "" if ok else f"expected {spec.outputs[i][:200]!r}, got {res.stdout[:200]!r}"
            status = "passed" if ok else "wrong_answer"
        elif status == "ok" and spec.kind == "call":
            try:
                got = returned_value(res.value) if res.value is not None else None
                ok = res.value is not None and value_matches(got, spec.outputs[i], cfg.float_tolerance,
                                                             spec.wrapped_outputs)  # fmt: skip
            except (ValueError, OverflowError) as e:
                got, ok, note = None, False, f"the return value cannot be compared: {e}"
            note = "" if ok else note or f"expected {_show(spec.outputs[i])}, got {_show(got)}"
            status = "passed" if ok else "wrong_answer"
        kept = {"status": status, "error": note, "stderr": stderr, "wall_s": res.wall_s, "wait_s": res.wait_s}
        if spec.kind == "assert" and res.calls is not None:
            kept["calls"] = res.calls  # replayed by the check, then dropped
        results.append(kept)
    return {"results": results, "latency_s": outcome.get("latency_s", 0.0)}


def verdict(spec: TestSpec, kept: dict, cfg: CodeVerifyConfig) -> tuple[str, int, int, str]:
    """(status, tests_passed, tests_total, detail) from a judged outcome (``judged``, checks replayed)."""
    total = len(spec.inputs)
    if "sandbox_error" in kept:
        return "sandbox_error", 0, total, clip(kept["sandbox_error"], cfg.detail_chars)
    if "runner_killed" in kept:
        return "runtime_error", 0, total, clip(kept["runner_killed"], cfg.detail_chars)
    passed, first, unknown = 0, None, None
    for i, res in enumerate(kept["results"]):
        status = res["status"]
        if status == "ok" and spec.kind == "assert":  # a replay that never came: never a pass
            status, res = "runtime_error", dict(res, error="the check was not replayed")
        elif status == "ok" and spec.checker is not None:  # a checker's reading that never came: never a pass
            status, res = PROBLEM_ERROR, dict(res, error="the problem's checker did not run")
        if status in UNKNOWN:  # says nothing about the candidate: its verdict only if nothing else failed
            unknown = unknown or (i, UNKNOWN[status], res["error"])
            continue
        if status == "passed":
            passed += 1
        elif first is None:
            first = (i, status, res["error"], res["stderr"])
            if cfg.stop_on_first_failure:
                break
    if first is None and unknown is not None:
        return unknown[1], passed, total, clip(f"test {unknown[0]}: {unknown[2]}", cfg.detail_chars)
    if first is None:
        return "passed", passed, total, ""
    i, status, note, stderr = first
    detail = f"test {i}: {status}" + (f": {note}" if note else "") + (f"\n{stderr}" if stderr else "")
    return status, passed, total, clip(detail, cfg.detail_chars)


def unfinished(kept: dict) -> bool:
    """Whether the machine kept a test of a judged outcome from finishing (``Status.UNFINISHED``)."""
    return any(res["status"] == Status.UNFINISHED for res in kept.get("results") or ())

