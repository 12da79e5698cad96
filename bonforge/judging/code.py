"""Code verification (stage ``verdicts``, see ``stages/verify.py``): run candidates against their problem's tests.

Reads ``problems`` (``PROBLEMS``, with a JSON test spec in ``tests``, see ``bonforge.judging.spec``) and
``candidates`` (``CANDIDATES``); writes ``verdicts`` (``VERDICTS``, key ``candidate_id``).

Callable in-process: without a ``pool`` it starts a ``SandboxPool`` for the call and closes it. Ray
workers on one node pass the node's shared pool (``bonforge.sandbox.ray_pool.node_pool``) instead.

Assert-style checks are the dataset's code: they run in a check server of their own, in a container
apart from the candidates' (``bonforge.sandbox.check_host``): the sandbox makes the calls the check planned,
the check server replays the check on the answers, and a program whose answers lead the check to other calls
runs again with the longer plan. Each outcome is judged as it arrives (an assert-style run's check
replayed then, a checker program's problem's outputs read by its checker then) and only what its verdict
needs is kept: a batch's extra host memory is bounded by the pool (``HOST_ANSWERS_PER_WORKER``), not by the
batch. Whatever comes back from the sandbox or the check server is read with bounded size and depth, and a row that
cannot be judged gets a verdict of its own: no program, and no one problem's data, can fail the stage.

Its jobs, by module: ``code_request`` (a spec and a program to the runner's request, its limits), this
module (the stage: extraction, one run per distinct program, the passes and the checks' replays),
``code_verdict`` (an outcome to a verdict), ``code_checkers`` (the problems' checker programs).

**Time bound.** A test's CPU limit is the problem's ``time_limit_s`` when it is a positive number under the
recipe's ``time_limit_s``, else the recipe's (``code_request.time_limit_s``: a NaN, infinite or huge value
never raises the bound); its wall limit ``W = limit * wall_factor + 1`` (``wire.wall_limit``), counted in the
program's own time. A candidate's budget (``code_request.budget_s``) is ``min(tests * W, candidate_wall_s)``,
and ``candidate_wall_s`` for an assert-style check (all its runs): tests left when it runs out count as
``timeout``. The host waits for one request at most ``LOAD_STRETCH`` times its budget plus
``pool.HOST_MARGIN_S`` + 1 s once a worker takes it.

**What the machine keeps from finishing** (``Status.UNFINISHED``, bonforge/sandbox/README.md) runs again alone
after every other request, each run alone allowed to wait longer (``wire.rerun_stretches``); still unfinished
at the last one, it is ``infra_error``, no label.

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
import logging
from typing import Protocol

import pyarrow as pa

from bonforge.errors import DataError
from bonforge.judging.code_checkers import Readings, blame_crashes
from bonforge.judging.code_request import build_request, program_language
from bonforge.judging.code_verdict import clip, judged, unfinished, verdict
from bonforge.judging.extract import extract_code
from bonforge.judging.passes import chunked, hit_probe, probe
from bonforge.judging.spec import TestSpec, parse_spec
from bonforge.sandbox.check_host import CheckHost, shared_check_host
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.wire import Status, rerun_stretches
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
MAX_ROUNDS = 100  # runs of one program for one check (its time budget ends it first, unless runs are instant)


class Pool(Protocol):
    def run(self, requests: list[dict]) -> list[dict]: ...


def verify_code(
    problems: pa.Table, candidates: pa.Table, cfg: CodeVerifyConfig, pool: Pool | None = None
) -> pa.Table:
    """One verdict per candidate (same order as ``candidates``). Identical programs for the same problem run
    once and share the verdict: the sandbox's time goes to distinct programs, and duplicate candidates
    can never get different labels (a contradiction in selection data). A problem whose tests cannot be
    used (its spec is malformed, e.g. a NaN time limit) or whose check cannot run (it does not compile, or
    its checker died, hung or misbehaved planning it) gives each of its candidates ``sandbox_error`` (a
    verdict that says nothing about the candidate); every other problem is judged."""
    check_host = shared_check_host(cfg)  # started only for assert-style problems, then kept for later calls
    cols = ["problem_id", "question", "tests"]
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
                    plans[pid] = _plan(check_host, pid, spec)
        spec = specs[pid]
        row = {
            "candidate_id": cand["candidate_id"], "problem_id": pid, "teacher": cand["teacher"],
            "extracted": None, "tests_total": len(spec.inputs) if spec else 0, "latency_ms": 0.0,
        }  # fmt: skip
        rows.append(row)
        if isinstance(plans.get(pid), str):
            row.update(status="sandbox_error", tests_passed=0, detail=clip(plans[pid], cfg.detail_chars))
            continue
        program, tag = extract_code(cand["text"], by_problem[pid]["question"], spec.kind, cfg.extraction)
        if not program.strip():
            row.update(status="compile_error", tests_passed=0, detail="no program found in the candidate's text")
            continue
        language, why = program_language(cand.get("language"), tag, spec, cfg)
        if why:
            row.update(status="compile_error", tests_passed=0, detail=why)
            continue
        key = (pid, language, program)
        if key not in first_of:
            first_of[key] = len(requests)
            plan = None
            if spec.kind == "assert":
                asserts[len(requests)], plan = plans[pid]
            requests.append(build_request(spec, program, cfg, cand["candidate_id"], plan, language=language))
            req_specs.append(spec)
        pending.append((row, spec, first_of[key]))
    if requests:
        readings = Readings(req_specs, cfg) if any(s.checker is not None for s in req_specs) else None
        try:
            with _pool(cfg, pool) as run:
                kept = _run_and_check(requests, req_specs, asserts, check_host, run, cfg, readings and readings.read)
            if readings:
                blame_crashes(req_specs, kept, readings.binaries, readings.checkers)
        finally:
            if readings:
                readings.close()
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


def _plan(check_host: CheckHost, pid: str, spec: TestSpec) -> tuple[str, list] | str:
    """(check key, the calls ``spec``'s check makes), planned by the check server; or why the check cannot run."""
    answer = check_host.plan(f"{spec.prelude}\n{spec.context}", spec.check, spec.entry_point)
    if "fault" in answer:
        log.warning("problem %s: its check cannot run (%s): its candidates get sandbox_error", pid, answer["fault"])
        return f"the problem's check cannot run: {answer['fault']}"
    if answer.get("error"):
        log.debug("planning the check of %s stopped at %s", pid, answer["error"])
    return answer["key"], answer["plan"]


# The host's extra memory while a batch is judged on a pool that streams outcomes (``SandboxPool``: the stage
# off Ray, the code reward), whatever the batch's size: at most about this many answers of one request
# (its tests x the output cap) per worker of the pool: the channel's read buffer, the parsed answer, the
# judged copy and, for an assert-style run, the check server's request. (``tests/sandbox/test_sandbox_memory.py``)
HOST_ANSWERS_PER_WORKER = 4


class _Replays:
    """The checks of assert-style requests, each replayed on its run's answers as that outcome arrives (on
    the pool's thread: the check host takes one request at a time from any thread), so that a run's call
    lines are dropped at once and never wait for the rest of the batch. A program whose answers lead the
    check to other calls is marked to run again with the longer plan while its time budget lasts (every
    run's own time counts: its wall time less its wait for a CPU). A replay the machine kept from finishing
    makes the run ``unfinished``."""

    def __init__(self, requests: list[dict], specs: list[TestSpec], asserts: dict[int, str], check_host: CheckHost,
                 cfg: CodeVerifyConfig):  # fmt: skip
        self.requests, self.specs, self.asserts, self.check_host, self.cfg = requests, specs, asserts, check_host, cfg
        self.plans: dict[int, list | None] = dict.fromkeys(asserts)
        self.go_ons = dict.fromkeys(asserts, False)
        self.spent = dict.fromkeys(asserts, 0.0)  # the program's own time over its runs (its budget's measure)
        self.walls = dict.fromkeys(asserts, 0.0)
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
        own = res["wall_s"] - res["wait_s"]  # the budget counts the program's own time (not its wait for a CPU)
        self.spent[i] += own
        self.walls[i] += res["wall_s"]
        res["wall_s"] = self.walls[i]  # the candidate's time, all runs
        if "calls" not in res:
            return  # a compile error, a failed run: judged as it is
        end = {"status": res["status"], "error": res["error"]}
        answer = self.check_host.replay(self.asserts[i], self.plans[i], res.pop("calls"), end,
                                        float(request["time_limit"]), self.go_ons[i])  # fmt: skip
        if answer.get("status") == Status.UNFINISHED:  # the machine kept the check from finishing: this run
            self.spent[i] -= own  # counts for nothing, it runs again alone (``_run_and_check``)
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


def _run_and_check(requests: list[dict], specs: list[TestSpec], asserts: dict[int, str], check_host: CheckHost, run,
                   cfg: CodeVerifyConfig, read=None) -> list[dict]:  # fmt: skip
    """Every request run and judged as it arrives (``judged``; an assert-style one's check replayed then,
    ``_Replays``), in two passes (the module's docstring says why verdicts stay those of one pass). The first
    runs each request under its ``probe``: a request that ends within it keeps that outcome; one whose run hit
    the probe's limit keeps nothing of it (its outcome, answers and spent time are dropped unread) and runs
    again, from the start, with its own limits after all other requests, beside the other long ones. With
    assert-style requests the first pass runs in chunks, two in the sandbox at a time (a pool that hands
    outcomes over only at the end holds at most two chunks'); then the long ones and the programs whose checks
    asked for more calls run again, round by round. ``read(i, kept)``: what is kept of request ``i``'s outcome
    once its problem's checker has read its outputs (``code_checkers.Readings.read``)."""
    replays = _Replays(requests, specs, asserts, check_host, cfg) if asserts else None
    long: list[int] = []  # requests whose probe ran out of time (appended from the pool's threads)

    def on(i: int, outcome: dict) -> dict:
        kept = replays.judged(i, outcome) if replays else judged(specs[i], outcome, cfg)
        return read(i, kept) if read else kept

    def on_probe(i: int, outcome: dict) -> dict | None:
        if probes[i] is not None and hit_probe(outcome):
            long.append(i)
            return None  # nothing of it is kept: the request runs again with its own limits
        return on(i, outcome)

    probes = [probe(r, cfg) for r in requests]
    first = [p if p is not None else r for p, r in zip(probes, requests, strict=True)]
    if replays is None:
        kept = run(first, on_probe)
    else:
        kept = chunked(first, on_probe, run)
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
        for stretch in rerun_stretches(requests[i]["wall_limit"]):  # each run alone may wait longer
            again = True
            while again:
                request = replays.rerun(i) if replays and replays.plans.get(i) is not None else requests[i]
                kept[i] = run([dict(request, stretch=stretch)], lambda _, o, i=i: on(i, o))[0]
                again = bool(replays) and i in replays.again
                if again:
                    replays.again.discard(i)
            if not unfinished(kept[i]):
                break
    return kept


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
