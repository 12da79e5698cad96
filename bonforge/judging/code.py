"""Code verification (stage ``verdicts``, see ``stages/verify.py``): run candidates against their problem's tests.

Reads ``problems`` (``PROBLEMS``, with a JSON test spec in ``tests``, see ``bonforge.judging.spec``) and
``candidates`` (``CANDIDATES``); writes ``verdicts`` (``VERDICTS``, key ``candidate_id``).

Callable in-process: without a ``pool`` it starts a ``SandboxPool`` for the call and closes it. Ray
workers on one node pass the node's shared pool (``bonforge.sandbox.ray_pool.node_pool``) instead.

Assert-style checks are the dataset's code: they run in a checker process of their own, in a container
apart from the candidates' (``bonforge.sandbox.checker``): the sandbox makes the calls the check planned,
the checker replays the check on the answers, and a program whose answers lead the check to other calls
runs again with the longer plan. Each outcome is judged as it arrives (an assert-style run's check
replayed then) and only what its verdict needs is kept: a batch's extra host memory is bounded by the pool
(``HOST_ANSWERS_PER_WORKER``), not by the batch. Whatever comes back from the sandbox or the checker is
read with bounded size and depth, and a row that cannot be judged gets a verdict of its own: no program,
and no one problem's data, can fail the stage.

**Time bound.** A test's CPU limit is the problem's ``time_limit_s`` when it is a positive number under the
recipe's ``time_limit_s``, else the recipe's (``time_limit_s()``: a NaN, infinite or huge value never
raises the bound); its wall limit ``W = limit * wall_factor + 1``. A candidate's budget (``budget_s()``)
is ``min(tests * W, candidate_wall_s)``, and ``candidate_wall_s`` for an assert-style check (all its runs):
tests left when it runs out count as ``timeout``. The host waits for one request at most its budget plus
``pool.HOST_MARGIN_S`` + 1 s once a worker takes it.

**Two passes** (``_run_and_check``). Each Python request runs first under a short probe (``passes.probe``: a
CPU limit of ``PROBE_S`` per test, ending at the first test out of time); the few that run into it (loops, heavy
programs) run again from the start with their own limits after every other request, side by side on the
sandbox's slots, instead of one loop met late running alone while the other slots have nothing left. Verdicts
are those of one pass: an outcome under the probe is kept only when no test ran out of time (a program that ends
within stricter limits ends the same way under its own), and nothing of a probe that ran out of time is kept,
its results, answers and spent time included. A hostile program cannot use the probe: it passes it only by
passing every test under stricter limits, running into it costs it only the probe's time before its own run,
and each request's runs are its own (the schedule changes no one else's outcome). A candidate's sandbox time is
then at most its probe's (its tests before the first one out of time, plus ``PROBE_S`` or the probe's wall
limit) plus its budget. Built programs (C++, Java, PyPy) run once: a second run would pay their build again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from typing import Protocol

import pyarrow as pa

from bonforge.errors import DataError
from bonforge.sandbox.checker import Checker, shared_checker
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.judging.extract import extract_code
from bonforge.judging.passes import chunked, hit_probe, probe
from bonforge.judging.compare import tokens_match, value_matches
from bonforge.judging.spec import TestSpec, parse_spec
from bonforge.sandbox.codec import decode_value
from bonforge.sandbox.languages import LANGUAGES, PYTHON, language_of, native_fields
from bonforge.sandbox.testlib import CRASHED, PROBLEM_ERROR, UNFINISHED_BUILD, Checkers
from bonforge.sandbox.wire import Limits, Status, wall_limit
from bonforge.schema import NO_LABEL, VERDICTS

log = logging.getLogger("bonforge.sandbox")

# 6: C++, Java and PyPy programs (the fence's tag or the record's language); testlib checker programs; a
# problem's memory limit; the last fenced block of any language the sandbox runs is the program.
# 5: the judge's fingerprint (sources, backend) in the key and identity; timeouts never reused.
# 4: a candidate's time budget; problems' limits capped by the recipe's; an exit or StopIteration raised in a
# call is a runtime error; a problem whose check or tests cannot be used is its candidates' sandbox_error;
# checks run in a container of their own; the output cap scales with the expected output; call outputs
# compared strictly unless the format wraps them (APPS); the runner's exit, streams and stack as CPython's.
# 3: assert-style checks run on the host; 2: a failed assert-style check is wrong_answer.
# 7: a wall limit counts the program's own time (not its wait for a CPU); a run the machine kept from finishing is
# run again alone, and if still unfinished its verdict is infra_error (no label).
VERSION = "7"
# A test's outcome that says nothing about the candidate, and the verdict it gives when no other test failed:
# the problem's checker failed, or the machine kept the run from finishing (even run again alone).
UNKNOWN = {PROBLEM_ERROR: "sandbox_error", Status.UNFINISHED: "infra_error"}
MAX_ROUNDS = 100  # runs of one program for one check (its time budget ends it first, unless runs are instant)


class Pool(Protocol):
    def run(self, requests: list[dict]) -> list[dict]: ...


def time_limit_s(spec: TestSpec, cfg: CodeVerifyConfig) -> float:
    """The per-test CPU limit: the problem's own when it is a finite positive number under the recipe's,
    else the recipe's (a problem's data never raises the recipe's bound, and a bad value never raises)."""
    own = spec.time_limit_s
    if isinstance(own, (int, float)) and not isinstance(own, bool) and math.isfinite(own) and 0 < own:
        return min(float(own), cfg.time_limit_s)
    return cfg.time_limit_s


def memory_mb(spec: TestSpec, cfg: CodeVerifyConfig, problem_mb: float | None = None) -> int:
    """A test's memory limit, MiB: the spec's ``memory_mb``, else the problem's recorded limit (its metadata's
    ``memory_limit_mb``), capped by the recipe's ``memory_mb`` (the sandbox is sized for it); the recipe's when
    the problem names none."""
    own = spec.memory_mb if spec.memory_mb is not None else problem_mb
    if isinstance(own, (int, float)) and not isinstance(own, bool) and math.isfinite(own) and own > 0:
        return max(16, min(int(own), cfg.memory_mb))
    return cfg.memory_mb


def budget_s(spec: TestSpec, cfg: CodeVerifyConfig, language: str = "python") -> float:
    """A candidate's wall-clock budget over all its tests (and all runs of an assert-style check)."""
    if spec.kind == "assert":
        return cfg.candidate_wall_s
    limit = time_limit_s(spec, cfg) * cfg.time_multiplier(language)
    return min(len(spec.inputs) * wall_limit(limit, cfg.wall_factor), cfg.candidate_wall_s)


def build_request(
    spec: TestSpec, program: str, cfg: CodeVerifyConfig, request_id: str, plan: list | None = None, go_on: bool = False,
    language: str = "python", problem_mb: float | None = None,
) -> dict:
    """The runner request for one candidate (inputs only: expected outputs and checks stay out of the
    sandbox); ``plan``: the calls an assert-style check makes (``Checker.plan``); ``language``: a name of
    ``languages.LANGUAGES`` (a compiled language is built once, before its tests, under its own limits)."""
    limit = time_limit_s(spec, cfg) * cfg.time_multiplier(language)
    memory = memory_mb(spec, cfg, problem_mb)
    if spec.kind == "stdio":
        tests = [{"input": i} for i in spec.inputs]
    elif spec.kind == "call":
        tests = [{"args": a} for a in spec.inputs]
    else:
        tests = [{"calls": plan or [], "go_on": go_on}]
    request = {
        "id": request_id, "kind": spec.kind, "program": program, "prelude": spec.prelude,
        "fn_name": spec.entry_point if spec.kind == "assert" else spec.fn_name, "tests": tests,
        **Limits(limit, cfg.wall_factor, memory, cfg.output_limit(_expected_bytes(spec))).fields(),
        "budget": budget_s(spec, cfg, language), "stop_on_failure": cfg.stop_on_first_failure,
    }  # fmt: skip
    if language != PYTHON.name:
        request.update(native_fields(LANGUAGES[language], program, memory, cfg.build_limits().fields()))
    return request


def _expected_bytes(spec: TestSpec) -> int:
    """The size of the spec's largest expected output (its output cap grows with it)."""
    sizes = [len(o.encode("utf-8", "surrogatepass")) if isinstance(o, str) else len(json.dumps(o))
             for o in spec.outputs or ()]  # fmt: skip
    return max(sizes, default=0)


def _clip(text: str, n: int) -> str:
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
    for i, res in enumerate(outcome["results"]):
        status, note = res["status"], res.get("error", "")
        if status == "ok" and spec.checker is not None:  # judged by the problem's checker program (later)
            results.append({"status": "ok", "error": "", "stdout": res["stdout"],
                            "stderr": _tail(res.get("stderr", ""), cfg.detail_chars), "wall_s": res.get("wall_s", 0.0)})
            continue
        if status == "ok" and spec.kind == "stdio":
            ok = tokens_match(res["stdout"], spec.outputs[i], cfg.float_tolerance, cfg.case_insensitive)
            note = "" if ok else f"expected {spec.outputs[i][:200]!r}, got {res['stdout'][:200]!r}"
            status = "passed" if ok else "wrong_answer"
        elif status == "ok" and spec.kind == "call":
            try:
                got = returned_value(res["value"])
                ok = value_matches(got, spec.outputs[i], cfg.float_tolerance, spec.wrapped_outputs)
            except (KeyError, ValueError, OverflowError) as e:
                got, ok, note = None, False, f"the return value cannot be compared: {e}"
            note = "" if ok else note or f"expected {_show(spec.outputs[i])}, got {_show(got)}"
            status = "passed" if ok else "wrong_answer"
        kept = {"status": status, "error": note, "stderr": _tail(res.get("stderr", ""), cfg.detail_chars),
                "wall_s": res.get("wall_s", 0.0)}  # fmt: skip
        if spec.kind == "assert" and "calls" in res:
            kept["calls"] = res["calls"]  # replayed by the check, then dropped
        results.append(kept)
    return {"results": results, "latency_s": outcome.get("latency_s", 0.0)}


def verdict(spec: TestSpec, kept: dict, cfg: CodeVerifyConfig) -> tuple[str, int, int, str]:
    """(status, tests_passed, tests_total, detail) from a judged outcome (``judged``, checks replayed)."""
    total = len(spec.inputs)
    if "sandbox_error" in kept:
        return "sandbox_error", 0, total, _clip(kept["sandbox_error"], cfg.detail_chars)
    if "runner_killed" in kept:
        return "runtime_error", 0, total, _clip(kept["runner_killed"], cfg.detail_chars)
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
        return unknown[1], passed, total, _clip(f"test {unknown[0]}: {unknown[2]}", cfg.detail_chars)
    if first is None:
        return "passed", passed, total, ""
    i, status, note, stderr = first
    detail = f"test {i}: {status}" + (f": {note}" if note else "") + (f"\n{stderr}" if stderr else "")
    return status, passed, total, _clip(detail, cfg.detail_chars)


def verify_code(
    problems: pa.Table, candidates: pa.Table, cfg: CodeVerifyConfig, pool: Pool | None = None
) -> pa.Table:
    """One verdict per candidate (same order as ``candidates``). Identical programs for the same problem run
    once and share the verdict: the sandbox's time goes to distinct programs, and duplicate candidates
    can never get different labels (a contradiction in selection data). A problem whose tests cannot be
    used (its spec is malformed, e.g. a NaN time limit) or whose check cannot run (it does not compile, or
    its checker died, hung or misbehaved planning it) gives each of its candidates ``sandbox_error`` (a
    verdict that says nothing about the candidate); every other problem is judged."""
    checker = shared_checker(cfg)  # started only for assert-style problems, then kept for later calls
    cols = ["problem_id", "question", "tests"] + (["metadata"] if "metadata" in problems.column_names else [])
    by_problem = {p["problem_id"]: p for p in problems.select(cols).to_pylist()}
    specs: dict[str, TestSpec] = {}
    plans: dict[str, tuple[str, list] | str] = {}  # problem -> (check key, plan), or why its check cannot run
    rows, requests, pending = [], [], []
    req_specs: list[TestSpec] = []
    asserts: dict[int, str] = {}  # request -> its check's key, for assert-style problems
    first_of: dict[tuple[str, str, str], int] = {}  # (problem, language, program) -> its request: run once
    has_language = "language" in candidates.column_names
    for cand in candidates.select(["candidate_id", "problem_id", "teacher", "text"]
                                  + (["language"] if has_language else [])).to_pylist():  # fmt: skip
        pid = cand["problem_id"]
        if pid not in by_problem:
            raise DataError(f"problem {pid!r} is not in the problems table", "candidates", cand["candidate_id"],
                            "problem_id")  # fmt: skip
        if pid not in specs:
            try:
                specs[pid] = spec = parse_spec(by_problem[pid]["tests"], pid)
            except DataError as e:  # one problem's bad data (a NaN limit, ...): its verdicts, not the batch's
                specs[pid], plans[pid] = None, f"the problem's tests cannot be used: {e}"
            else:
                if spec.kind == "assert":
                    plans[pid] = _plan(checker, pid, spec)
        spec = specs[pid]
        row = {
            "candidate_id": cand["candidate_id"], "problem_id": pid, "teacher": cand["teacher"],
            "extracted": None, "tests_total": len(spec.inputs) if spec else 0, "latency_ms": 0.0,
        }  # fmt: skip
        rows.append(row)
        if isinstance(plans.get(pid), str):
            row.update(status="sandbox_error", tests_passed=0, detail=_clip(plans[pid], cfg.detail_chars))
            continue
        program, tag = extract_code(cand["text"], by_problem[pid]["question"], spec.kind, cfg.extraction)
        if not program.strip():
            row.update(status="compile_error", tests_passed=0, detail="no program found in the candidate's text")
            continue
        language, why = _language(cand.get("language"), tag, spec, cfg)
        if why:
            row.update(status="compile_error", tests_passed=0, detail=why)
            continue
        key = (pid, language, program)
        if key not in first_of:
            first_of[key] = len(requests)
            plan = None
            if spec.kind == "assert":
                asserts[len(requests)], plan = plans[pid]
            requests.append(build_request(spec, program, cfg, cand["candidate_id"], plan, language=language,
                                          problem_mb=_recorded_memory(by_problem[pid])))  # fmt: skip
            req_specs.append(spec)
        pending.append((row, spec, first_of[key]))
    if requests:
        with _pool(cfg, pool) as run:
            kept = _run_and_check(requests, req_specs, asserts, checker, run, cfg)
        if any(s.checker is not None for s in req_specs):
            checkers = Checkers(cfg)  # a pool of their own: never a candidate's containers
            try:
                run_checkers(req_specs, kept, checkers)
            finally:
                checkers.close()
        for row, spec, i in pending:
            status, passed, total, detail = verdict(spec, kept[i], cfg)
            row.update(status=status, tests_passed=passed, tests_total=total, detail=detail or None)
            results = kept[i].get("results")
            run_s = sum(r["wall_s"] for r in results) if results is not None else kept[i].get("latency_s", 0.0)
            row["latency_ms"] = round(run_s * 1000, 3)
    for row in rows:  # a verdict that is no label has no reward either
        row["correct"] = row["status"] == "passed"
        known = row["tests_total"] and row["status"] not in NO_LABEL
        row["reward"] = row["tests_passed"] / row["tests_total"] if known else 0.0
    return pa.Table.from_pylist(rows, schema=VERDICTS)


def _language(named: str | None, tag: str | None, spec: TestSpec, cfg: CodeVerifyConfig) -> tuple[str, str]:
    """(the program's language, "") or ("", why it cannot run): the record's ``language`` when it names one,
    else the fence's tag, else the recipe's ``default_language``. Only Python runs call and assert tests."""
    if named:
        lang = language_of(named)
        if lang is None:
            return "", f"the candidate names an unknown language {named[:40]!r} (known: {', '.join(LANGUAGES)})"
    else:
        lang = language_of(tag) or LANGUAGES[cfg.default_language]
    if spec.kind != "stdio" and lang is not PYTHON:
        return "", f"a {lang.name} program cannot run {spec.kind}-style tests (they call Python functions)"
    return lang.name, ""


def _recorded_memory(problem: dict) -> float | None:
    """The memory limit a loader recorded in the problem's metadata (``memory_limit_mb``), if any."""
    try:
        meta = json.loads(problem.get("metadata") or "{}")
    except (ValueError, RecursionError):
        return None
    return meta.get("memory_limit_mb") if isinstance(meta, dict) else None


def run_checkers(specs: list[TestSpec], kept: list[dict], checkers: Checkers) -> None:
    """Judge, with their problem's checker program, the tests that ran to the end (status ``ok``) of every
    request whose problem has one: each checker compiled once (``Checkers.compile``), then one checker
    request per candidate. A test whose checker failed is the problem's error (``PROBLEM_ERROR``)."""
    todo = [i for i, s in enumerate(specs) if s.checker is not None and kept[i].get("results")]
    by_spec: dict[int, dict] = {}  # a problem's spec is one object shared by its requests
    for i in todo:
        by_spec.setdefault(id(specs[i]), specs[i].checker)
    binaries = dict(zip(by_spec, checkers.compile(list(by_spec.values())), strict=True))
    jobs, where = [], []
    for i in todo:
        binary = binaries[id(specs[i])]
        waiting = [k for k, r in enumerate(kept[i]["results"]) if r["status"] == "ok"]
        if binary.startswith(("!", UNFINISHED_BUILD)):  # it does not build: the problem's; or the machine's
            status = PROBLEM_ERROR if binary.startswith("!") else Status.UNFINISHED
            for k in waiting:
                kept[i]["results"][k].update(status=status, error=binary[1:])
                kept[i]["results"][k].pop("stdout", None)
            continue
        if waiting:
            items = [(specs[i].inputs[k], kept[i]["results"][k].pop("stdout"), specs[i].outputs[k]) for k in waiting]
            jobs.append((binary, items))
            where.append((i, waiting))
    for (i, waiting), readings in zip(where, checkers.check(jobs), strict=True):
        for k, (status, note) in zip(waiting, readings, strict=True):
            kept[i]["results"][k].update(status=status, error=note)
    _blame_crashes(specs, kept, binaries, checkers)


def _blame_crashes(specs: list[TestSpec], kept: list[dict], binaries: dict[int, str], checkers: Checkers) -> None:
    """A checker that crashed on a candidate's output (``CRASHED``: not testlib's FAIL) is run once more per
    such test with the jury's answer as the output. Accepted: the candidate's output made it crash, and the
    test is that candidate's ``wrong_answer`` (an RL policy must not earn the problem's error, a verdict that
    is never reused and that says "nothing is known", by finding outputs that crash a buggy checker). Not
    accepted: the checker is broken whatever it reads, the problem's error."""
    crashed = [(i, k) for i, req in enumerate(kept) for k, r in enumerate(req.get("results") or ())
               if r["status"] == CRASHED]  # fmt: skip
    controls: dict[tuple[int, int], int] = {}  # (spec, test) -> its control's place among the jobs
    for i, k in crashed:
        controls.setdefault((id(specs[i]), k), len(controls))
    if not controls:
        return
    spec_of = {id(specs[i]): specs[i] for i, _ in crashed}
    jobs = [(binaries[sid], [(spec_of[sid].inputs[k], spec_of[sid].outputs[k], spec_of[sid].outputs[k])])
            for sid, k in controls]  # fmt: skip
    control = [readings[0] for readings in checkers.check(jobs)]
    for i, k in crashed:
        res = kept[i]["results"][k]
        status, note = control[controls[id(specs[i]), k]]
        if status == "passed":
            log.warning("a checker crashed on one candidate's output and accepts the jury's answer: %s", res["error"])
            res.update(status="wrong_answer", error="the checker crashed on this output (it accepts the jury's "
                       f"answer): {res['error']}")  # fmt: skip
        elif status == Status.UNFINISHED:  # the control could not tell: nothing known, the machine's
            res.update(status=status, error=f"{res['error']} (its control run did not finish: {note})")
        else:
            res.update(status=PROBLEM_ERROR, error=f"{res['error']} (on the jury's answer too: {note or status})")


def _plan(checker: Checker, pid: str, spec: TestSpec) -> tuple[str, list] | str:
    """(check key, the calls ``spec``'s check makes), planned by the checker; or why the check cannot run."""
    answer = checker.plan(f"{spec.prelude}\n{spec.context}", spec.check, spec.entry_point)
    if "fault" in answer:
        log.warning("problem %s: its check cannot run (%s): its candidates get sandbox_error", pid, answer["fault"])
        return f"the problem's check cannot run: {answer['fault']}"
    if answer.get("error"):
        log.debug("planning the check of %s stopped at %s", pid, answer["error"])
    return answer["key"], answer["plan"]


# The host's extra memory while a batch is judged on a pool that streams outcomes (``SandboxPool``: the stage
# off Ray, the code reward), whatever the batch's size: at most about this many answers of one request
# (its tests x the output cap) per worker of the pool: the channel's read buffer, the parsed answer, the
# judged copy and, for an assert-style run, the checker's request. (``tests/sandbox/test_sandbox_memory.py``)
HOST_ANSWERS_PER_WORKER = 4


class _Replays:
    """The checks of assert-style requests, each replayed on its run's answers as that outcome arrives (on
    the pool's thread: the checker takes one request at a time from any thread), so that a run's call
    lines are dropped at once and never wait for the rest of the batch. A program whose answers lead the
    check to other calls is marked to run again with the longer plan while its time budget lasts (every
    run's wall time counts)."""

    def __init__(self, requests: list[dict], specs: list[TestSpec], asserts: dict[int, str], checker: Checker,
                 cfg: CodeVerifyConfig):  # fmt: skip
        self.requests, self.specs, self.asserts, self.checker, self.cfg = requests, specs, asserts, checker, cfg
        self.plans: dict[int, list | None] = dict.fromkeys(asserts)
        self.go_ons = dict.fromkeys(asserts, False)
        self.spent = dict.fromkeys(asserts, 0.0)
        self.runs = dict.fromkeys(asserts, 0)
        self.again: set[int] = set()

    def judged(self, i: int, outcome: dict) -> dict:
        """Request ``i``'s outcome judged (``judged``), and for an assert-style one its check replayed."""
        kept = judged(self.specs[i], outcome, self.cfg)
        if i in self.asserts:
            try:
                self._replay(i, kept)
            except Exception as e:  # noqa: BLE001  (a bug here: that candidate's verdict, never the batch's)
                log.warning("could not replay a check (%s: %s): the candidate gets runtime_error", type(e).__name__, e)
                return {"runner_killed": f"the check could not be replayed: {type(e).__name__}: {e}"}
        return kept

    def _replay(self, i: int, kept: dict) -> None:
        self.runs[i] += 1
        if not kept.get("results"):
            return  # a sandbox failure: judged as it is
        res, request = kept["results"][0], self.requests[i]
        if res["status"] == Status.UNFINISHED:  # run again alone (``_run_and_check``): this run counts for nothing
            res.pop("calls", None)
            return
        self.spent[i] += res["wall_s"]
        res["wall_s"] = self.spent[i]  # the candidate's time, all runs
        if "calls" not in res:
            return  # a compile error, a failed run: judged as it is
        end = {"status": res["status"], "error": res["error"]}
        answer = self.checker.replay(self.asserts[i], self.plans[i], res.pop("calls"), end,
                                     float(request["time_limit"]), self.go_ons[i])  # fmt: skip
        if "more" not in answer:
            res["status"], res["error"] = answer["status"], answer.get("error", "")
        elif request["budget"] - self.spent[i] <= 0 or self.runs[i] >= MAX_ROUNDS:
            res["status"] = "timeout"
            res["error"] = (f"the check's calls depended on the program's answers: its time budget "
                            f"({request['budget']:.1f} s) ran out after {self.runs[i]} runs")  # fmt: skip
        else:
            self.plans[i], self.go_ons[i] = answer["more"], bool(answer.get("go_on"))
            self.again.add(i)

    def rerun(self, i: int) -> dict:
        """The request that runs ``i``'s program again with its check's longer plan, in what is left of its budget."""
        request = self.requests[i]
        return dict(request, tests=[{"calls": self.plans[i], "go_on": self.go_ons[i]}],
                    budget=request["budget"] - self.spent[i])


def _run_and_check(requests: list[dict], specs: list[TestSpec], asserts: dict[int, str], checker: Checker, run,
                   cfg: CodeVerifyConfig) -> list[dict]:  # fmt: skip
    """Every request run and judged as it arrives (``judged``; an assert-style one's check replayed then,
    ``_Replays``), in two passes (the module's docstring says why verdicts stay those of one pass). The first
    runs each request under its ``probe``: a request that ends within it keeps that outcome; one whose run hit
    the probe's limit keeps nothing of it (its outcome, answers and spent time are dropped unread) and runs
    again, from the start, with its own limits after all other requests, beside the other long ones. With
    assert-style requests the first pass runs in chunks, two in the sandbox at a time (a pool that hands
    outcomes over only at the end holds at most two chunks'); then the long ones and the programs whose checks
    asked for more calls run again, round by round."""
    replays = _Replays(requests, specs, asserts, checker, cfg) if asserts else None
    long: list[int] = []  # requests whose probe ran out of time (appended from the pool's threads)

    def on_probe(i: int, outcome: dict) -> dict | None:
        if probes[i] is not None and hit_probe(outcome):
            long.append(i)
            return None  # nothing of it is kept: the request runs again with its own limits
        return replays.judged(i, outcome) if replays else judged(specs[i], outcome, cfg)

    probes = [probe(r, cfg) for r in requests]
    first = [p if p is not None else r for p, r in zip(probes, requests, strict=True)]
    if replays is None:
        kept = run(first, on_probe)
    else:
        kept = chunked(first, on_probe, run)
    on = replays.judged if replays else (lambda i, o: judged(specs[i], o, cfg))
    batch = [(i, requests[i]) for i in sorted(long)]  # the long ones, with their own limits
    while batch or replays and replays.again:
        if replays:  # the programs whose checks asked for more calls, with the longer plans
            batch += [(i, replays.rerun(i)) for i in sorted(replays.again)]
            replays.again.clear()
        reruns = run([r for _, r in batch], lambda k, o, batch=batch: on(batch[k][0], o))
        for (i, _), rerun in zip(batch, reruns, strict=True):
            kept[i] = rerun
        batch = []
    for i in [i for i, k in enumerate(kept) if unfinished(k)]:  # alone, once all others are done
        again = True
        while again:
            request = replays.rerun(i) if replays and replays.plans.get(i) is not None else requests[i]
            kept[i] = run([request], lambda _, o, i=i: on(i, o))[0]
            again = bool(replays) and i in replays.again
            if again:
                replays.again.discard(i)
    return kept


def unfinished(kept: dict) -> bool:
    """Whether the machine kept a test of a judged outcome from finishing (``Status.UNFINISHED``)."""
    return any(res["status"] == Status.UNFINISHED for res in kept.get("results") or ())


@contextlib.contextmanager
def _pool(cfg: CodeVerifyConfig, pool: Pool | None):
    """``run(requests, on_outcome)`` on the given pool, or on one started for this call. ``on_outcome(i,
    outcome)`` turns each outcome into what is kept of it, on a pool that streams them (``SandboxPool``) as
    it arrives; on another pool once its ``run`` returns."""
    if pool is None:
        from bonforge.sandbox.pool import SandboxPool

        with SandboxPool(cfg) as own:
            yield own.run
        return
    if getattr(pool, "streams_outcomes", False):
        yield pool.run
        return

    def run(requests: list[dict], on_outcome) -> list[dict]:
        return [on_outcome(i, o) for i, o in enumerate(pool.run(requests))]

    yield run
