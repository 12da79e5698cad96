"""Code verification (stage ``verdicts``, see ``tasks/verify.py``): run candidates against their problem's tests.

Reads ``problems`` (``PROBLEMS``, with a JSON test spec in ``tests``, see ``bonforge.sandbox.spec``) and
``candidates`` (``CANDIDATES``); writes ``verdicts`` (``VERDICTS``, key ``candidate_id``).

Callable in-process: without a ``pool`` it starts a ``SandboxPool`` for the call and closes it. Ray
workers on one node pass the node's shared pool (``bonforge.sandbox.ray_pool.node_pool``) instead.
"""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa

from bonforge.errors import DataError
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.extract import extract_program
from bonforge.sandbox.judge import tokens_match, value_matches
from bonforge.sandbox.spec import TestSpec, parse_spec
from bonforge.schema import VERDICTS

VERSION = "2"  # 2: a failed assert-style check is wrong_answer (was runtime_error)


class Pool(Protocol):
    def run(self, requests: list[dict]) -> list[dict]: ...


def build_request(spec: TestSpec, program: str, cfg: CodeVerifyConfig, request_id: str) -> dict:
    """The runner request for one candidate (inputs only: expected outputs stay on the host)."""
    limit = spec.time_limit_s or cfg.time_limit_s
    if spec.kind == "stdio":
        tests = [{"input": i} for i in spec.inputs]
    elif spec.kind == "call":
        tests = [{"args": a} for a in spec.inputs]
    else:
        tests = [{}]
    return {
        "id": request_id, "kind": spec.kind, "program": program, "prelude": spec.prelude,
        "fn_name": spec.fn_name, "check": spec.check, "tests": tests,
        "time_limit": limit, "wall_limit": limit * cfg.wall_factor + 1.0, "memory_mb": cfg.memory_mb,
        "output_limit": cfg.output_limit_bytes, "stop_on_failure": cfg.stop_on_first_failure,
        "nproc": cfg.pids_limit if cfg.backend == "docker" else None,
    }  # fmt: skip


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n // 2] + "\n...\n" + text[-(n - n // 2) :]


def judge_outcome(spec: TestSpec, outcome: dict, cfg: CodeVerifyConfig) -> tuple[str, int, int, str]:
    """(status, tests_passed, tests_total, detail) for one candidate's pool outcome."""
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
                ok = "value" in res and value_matches(res["value"], spec.outputs[i], cfg.float_tolerance)
                note = "" if ok else note or f"expected {spec.outputs[i]!r:.200}, got {res.get('value')!r:.200}"
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
    by_problem = {p["problem_id"]: p for p in problems.select(["problem_id", "question", "tests"]).to_pylist()}
    specs: dict[str, TestSpec] = {}
    rows, requests, pending = [], [], []
    first_of: dict[tuple[str, str], int] = {}  # (problem, program) -> its request: identical programs run once
    for cand in candidates.select(["candidate_id", "problem_id", "teacher", "text"]).to_pylist():
        pid = cand["problem_id"]
        if pid not in by_problem:
            raise DataError(f"problem {pid!r} is not in the problems table", "candidates", cand["candidate_id"], "problem_id")
        if pid not in specs:
            specs[pid] = parse_spec(by_problem[pid]["tests"], pid)
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
            requests.append(build_request(spec, program, cfg, cand["candidate_id"]))
        pending.append((row, spec, first_of[key]))
    if requests:
        outcomes = _run(requests, cfg, pool)
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


def _run(requests: list[dict], cfg: CodeVerifyConfig, pool: Pool | None) -> list[dict]:
    if pool is not None:
        return pool.run(requests)
    from bonforge.sandbox.pool import SandboxPool

    with SandboxPool(cfg) as own:
        return own.run(requests)
