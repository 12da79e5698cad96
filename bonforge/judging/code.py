"""Code verification (stage ``verdicts``, see ``stages/verify.py``): run candidates against their problem's tests.

Reads ``problems`` (``PROBLEMS``, with a JSON test spec in ``tests``, see ``bonforge.judging.spec``) and
``candidates`` (``CANDIDATES``); writes ``verdicts`` (``VERDICTS``, key ``candidate_id``).

Callable in-process: without a ``pool`` it starts a ``SandboxPool`` for the call and closes it. Ray
workers on one node pass the node's shared pool (``bonforge.sandbox.ray_pool.node_pool``) instead.

Assert-style checks run on the host in a checker process (``bonforge.sandbox.checker``): the sandbox
makes the calls the check planned, the checker replays the check on the answers, and a program whose
answers lead the check to other calls runs again with the longer plan (bounded rounds). Whatever comes
back from the sandbox is read with bounded size and depth, and a row that cannot be judged gets a
verdict of its own: no program can fail the stage.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
from typing import Protocol

import pyarrow as pa

from bonforge.errors import DataError
from bonforge.sandbox.checker import MAX_ROUNDS, Checker
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.judging.extract import extract_program
from bonforge.sandbox.pool import Background
from bonforge.judging.compare import tokens_match, value_matches
from bonforge.judging.spec import TestSpec, parse_spec
from bonforge.sandbox.runner import decode_value
from bonforge.schema import VERDICTS

log = logging.getLogger("bonforge.sandbox")

VERSION = "3"  # 3: assert-style checks run on the host; 2: a failed assert-style check is wrong_answer


class Pool(Protocol):
    def run(self, requests: list[dict]) -> list[dict]: ...


def build_request(
    spec: TestSpec, program: str, cfg: CodeVerifyConfig, request_id: str, plan: list | None = None, go_on: bool = False
) -> dict:
    """The runner request for one candidate (inputs only: expected outputs and checks stay on the host);
    ``plan``: the calls an assert-style check makes (``Checker.plan``)."""
    limit = spec.time_limit_s or cfg.time_limit_s
    if spec.kind == "stdio":
        tests = [{"input": i} for i in spec.inputs]
    elif spec.kind == "call":
        tests = [{"args": a} for a in spec.inputs]
    else:
        tests = [{"calls": plan or [], "go_on": go_on}]
    return {
        "id": request_id, "kind": spec.kind, "program": program, "prelude": spec.prelude,
        "fn_name": spec.entry_point if spec.kind == "assert" else spec.fn_name, "tests": tests,
        "time_limit": limit, "wall_limit": limit * cfg.wall_factor + 1.0, "memory_mb": cfg.memory_mb,
        "output_limit": cfg.output_limit_bytes, "stop_on_failure": cfg.stop_on_first_failure,
    }  # fmt: skip


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
    """(status, tests_passed, tests_total, detail) for one candidate's pool outcome; a candidate whose
    outcome cannot be judged at all (a bug here, met by no program so far) is that candidate's
    ``runtime_error``, never a failed stage."""
    try:
        return _judge(spec, outcome, cfg)
    except Exception as e:  # noqa: BLE001
        log.warning("could not judge an outcome (%s: %s): the candidate gets runtime_error", type(e).__name__, e)
        return "runtime_error", 0, len(spec.inputs), _clip(f"the outcome could not be judged: {type(e).__name__}: {e}", cfg.detail_chars)


def _judge(spec: TestSpec, outcome: dict, cfg: CodeVerifyConfig) -> tuple[str, int, int, str]:
    total = len(spec.inputs)
    if "sandbox_error" in outcome:
        return "sandbox_error", 0, total, _clip(outcome["sandbox_error"], cfg.detail_chars)
    if "runner_killed" in outcome:
        return "runtime_error", 0, total, _clip(outcome["runner_killed"], cfg.detail_chars)
    passed, first = 0, None
    for i, res in enumerate(outcome["results"]):
        status, note = res["status"], res.get("error", "")
        if status == "ok":
            if spec.kind == "stdio":
                ok = tokens_match(res["stdout"], spec.outputs[i], cfg.float_tolerance, cfg.case_insensitive)
                note = "" if ok else f"expected {spec.outputs[i][:200]!r}, got {res['stdout'][:200]!r}"
            elif spec.kind == "call":
                try:
                    got = returned_value(res["value"])
                    ok = value_matches(got, spec.outputs[i], cfg.float_tolerance, spec.wrapped_outputs)
                except (KeyError, ValueError, OverflowError) as e:
                    got, ok, note = None, False, f"the return value cannot be compared: {e}"
                note = "" if ok else note or f"expected {_show(spec.outputs[i])}, got {_show(got)}"
            else:
                ok = True
            status = "passed" if ok else "wrong_answer"
        if status == "passed":
            passed += 1
        elif first is None:
            first = (i, status, note, res.get("stderr", ""))
            if cfg.stop_on_first_failure:
                break
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
    can never get different labels (a contradiction in selection data)."""
    with Checker(cfg.memory_mb + 512) as checker:  # started only for assert-style problems
        return _verify(problems, candidates, cfg, pool, checker)


def _verify(problems: pa.Table, candidates: pa.Table, cfg: CodeVerifyConfig, pool: Pool | None, checker: Checker) -> pa.Table:
    by_problem = {p["problem_id"]: p for p in problems.select(["problem_id", "question", "tests"]).to_pylist()}
    specs: dict[str, TestSpec] = {}
    plans: dict[str, list] = {}
    rows, requests, pending = [], [], []
    asserts: dict[int, str] = {}  # request -> problem, for assert-style problems
    first_of: dict[tuple[str, str], int] = {}  # (problem, program) -> its request: identical programs run once
    for cand in candidates.select(["candidate_id", "problem_id", "teacher", "text"]).to_pylist():
        pid = cand["problem_id"]
        if pid not in by_problem:
            raise DataError(f"problem {pid!r} is not in the problems table", "candidates", cand["candidate_id"], "problem_id")
        if pid not in specs:
            specs[pid] = spec = parse_spec(by_problem[pid]["tests"], pid)
            if spec.kind == "assert":
                plans[pid] = _plan(checker, pid, spec)
        spec = specs[pid]
        program = extract_program(cand["text"], by_problem[pid]["question"], spec.kind, cfg.extraction)
        row = {
            "candidate_id": cand["candidate_id"], "problem_id": pid, "teacher": cand["teacher"],
            "extracted": None, "tests_total": len(spec.inputs), "latency_ms": 0.0,
        }  # fmt: skip
        rows.append(row)
        if not program.strip():
            row.update(status="compile_error", tests_passed=0, detail="no program found in the candidate's text")
            continue
        key = (pid, program)
        if key not in first_of:
            first_of[key] = len(requests)
            if spec.kind == "assert":
                asserts[len(requests)] = pid
            requests.append(build_request(spec, program, cfg, cand["candidate_id"], plans.get(pid)))
        pending.append((row, spec, first_of[key]))
    if requests:
        with _pool(cfg, pool) as run:
            outcomes = _run_and_check(requests, asserts, checker, run) if asserts else run(requests)
        for row, spec, i in pending:
            outcome = outcomes[i]
            status, passed, total, detail = judge_outcome(spec, outcome, cfg)
            row.update(status=status, tests_passed=passed, tests_total=total, detail=detail or None)
            run_s = sum(r["wall_s"] for r in outcome["results"]) if "results" in outcome else outcome["latency_s"]
            row["latency_ms"] = round(run_s * 1000, 3)
    for row in rows:
        row["correct"] = row["status"] == "passed"
        row["reward"] = row["tests_passed"] / row["tests_total"] if row["tests_total"] else 0.0
    return pa.Table.from_pylist(rows, schema=VERDICTS)


def _plan(checker: Checker, pid: str, spec: TestSpec) -> list:
    """The calls ``spec``'s check makes, planned on the host (see ``bonforge.sandbox.checker``)."""
    answer = checker.plan(pid, f"{spec.prelude}\n{spec.context}", spec.check, spec.entry_point)
    if "fault" in answer:
        raise DataError(f"the check cannot run: {answer['fault']}", "problems", pid, "tests")
    if answer.get("error"):
        log.debug("planning the check of %s stopped at %s", pid, answer["error"])
    return answer["plan"]


CHUNK = 64  # requests per pool call when checks are replayed on the host meanwhile


def _run_and_check(requests: list[dict], asserts: dict[int, str], checker: Checker, run) -> list[dict]:
    """Run every request in chunks, two in the sandbox at a time, replaying the checks of each chunk as it
    comes back: the host's share of the work overlaps the sandbox's."""
    outcomes: list[dict] = []
    starts = range(0, len(requests), CHUNK)
    def launch(s: int) -> Background:
        return Background(run, requests[s : s + CHUNK])

    ahead = collections.deque(map(launch, starts[:2]))
    for k, start in enumerate(starts):
        outcomes += ahead.popleft().result()  # after Ctrl-C, no further chunk starts; the pool's close stops these
        if k + 2 < len(starts):
            ahead.append(launch(starts[k + 2]))
        mine = {i: asserts[i] for i in range(start, len(outcomes)) if i in asserts}
        _check_asserts(requests, outcomes, mine, checker, run)
    return outcomes


def _check_asserts(requests: list[dict], outcomes: list[dict], asserts: dict[int, str], checker: Checker, run) -> None:
    """Replay each assert-style candidate's check on its run's answers, turning the run's result into the
    verdict; run again, with the longer plan, those whose check asked for calls the run did not make
    (at most ``MAX_ROUNDS`` runs of a program)."""
    plans: dict[int, list | None] = dict.fromkeys(asserts)
    go_ons = dict.fromkeys(asserts, False)
    todo = list(asserts)
    for round_no in range(1, MAX_ROUNDS + 1):
        again = []
        for i in todo:
            if "results" not in outcomes[i] or "calls" not in outcomes[i]["results"][0]:
                continue  # a sandbox failure or a compile error: judged as it is
            res = outcomes[i]["results"][0]
            end = {"status": res["status"], "error": res.get("error", "")}
            answer = checker.replay(asserts[i], plans[i], res["calls"], end, float(requests[i]["time_limit"]), go_ons[i])
            if "more" not in answer:
                res["status"] = "ok" if answer["status"] == "passed" else answer["status"]
                res["error"] = answer.get("error", "")
            elif round_no == MAX_ROUNDS:
                res["status"] = "runtime_error"
                res["error"] = (f"the check's calls still depended on the program's answers after {MAX_ROUNDS} runs "
                                "(or it passes values the sandbox cannot carry: see the sandbox README)")  # fmt: skip
            else:
                plans[i], go_ons[i] = answer["more"], bool(answer.get("go_on"))
                again.append(i)
        if not again:
            return
        reruns = run([dict(requests[i], tests=[{"calls": plans[i], "go_on": go_ons[i]}]) for i in again])
        for i, outcome in zip(again, reruns, strict=True):
            if "results" in outcome and "results" in outcomes[i]:
                outcome["results"][0]["wall_s"] += outcomes[i]["results"][0]["wall_s"]  # the candidate's time, all runs
            outcomes[i] = outcome
        todo = again


@contextlib.contextmanager
def _pool(cfg: CodeVerifyConfig, pool: Pool | None):
    """``run(requests)`` on the given pool, or on one started for this call."""
    if pool is not None:
        yield pool.run
        return
    from bonforge.sandbox.pool import SandboxPool

    with SandboxPool(cfg) as own:
        yield own.run
