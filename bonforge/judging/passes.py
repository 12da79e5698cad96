"""How the code judge hands its requests to the sandbox (``judging.code._run_and_check``): each request's short
first pass (``probe``; one that runs into it runs again with its own limits at the end, the module docstring of
``judging.code`` says why its verdict stays that of one pass), and ``chunked``, which keeps two chunks of
requests in the sandbox at a time."""

from __future__ import annotations

import itertools
import queue

from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.lanes import Background
from bonforge.sandbox.wire import Status, wall_limit

CHUNK = 64  # requests per pool call when checks are replayed (bounds what a pool that does not stream holds)


PROBE_S = 0.1  # the first pass's CPU limit per test (``probe``): CodeT's programs, but for its loops, take < 0.05 s
PROBE_SLACK_S = 0.5  # its wall limit: PROBE_S * wall_factor + this (a sleeping program is re-run sooner)


def probe(request: dict, cfg: CodeVerifyConfig) -> dict | None:
    """``request``'s first pass: each test's CPU limit cut to ``PROBE_S``, its wall limit to ``PROBE_S *
    wall_factor + PROBE_SLACK_S`` (its budget unchanged), ending at its first test that runs out of time.
    None when the request runs once with its own limits: its limit is no longer than the probe, or it runs a
    built program (C++, Java, PyPy: a second run would pay its build again, g++'s or javac's 0.5-2 CPU-s,
    more than the probe saves)."""
    if "exec" in request or float(request["time_limit"]) <= PROBE_S:
        return None
    wall = min(wall_limit(PROBE_S, cfg.wall_factor, PROBE_SLACK_S), float(request["wall_limit"]))
    return dict(request, time_limit=PROBE_S, wall_limit=wall, stop_on_timeout=True)


def hit_probe(outcome: dict) -> bool:
    """Whether a probe's outcome has a test that ran out of time (its CPU, wall or budget) or that the machine
    kept from finishing: only the run with the request's own limits can say what that test does."""
    return any(res.get("status") in (Status.TIMEOUT, Status.UNFINISHED) for res in outcome.get("results") or ())


def chunked(requests: list[dict], on_outcome, run) -> list[dict]:
    """``run`` in chunks of ``CHUNK`` requests, two in flight, the next launched as soon as EITHER ends: a
    chunk held up by one long program must not keep the other worker idle until it ends."""
    finished: queue.Queue[int] = queue.Queue()

    def chunk(s: int) -> list[dict]:
        try:
            return run(requests[s : s + CHUNK], lambda i, o: on_outcome(s + i, o))
        finally:
            finished.put(s)

    starts = iter(range(0, len(requests), CHUNK))
    running = {s: Background(chunk, s) for s in itertools.islice(starts, 2)}
    done: dict[int, list[dict]] = {}
    while running:
        s = _next_finished(finished)
        done[s] = running.pop(s).result()  # after Ctrl-C, no further chunk starts; the pool's close stops these
        nxt = next(starts, None)
        if nxt is not None:
            running[nxt] = Background(chunk, nxt)
    return [outcome for s in sorted(done) for outcome in done[s]]


def _next_finished(finished: queue.Queue[int]) -> int:
    """The next chunk to end, waited for in short steps (a long wait would not see Ctrl-C: ``Background``)."""
    while True:
        try:
            return finished.get(timeout=0.2)
        except queue.Empty:
            continue
