"""Checker programs (testlib's conventions): compiled once per problem, run in a sandbox of their own.

A problem's checker decides whether an output is right when many are (any shortest path, a construction, a
float within tolerance). It comes with the problem table, so it is not trusted code either: it runs in a
pool of containers of its own (``SandboxPool`` with the recipe's sandbox settings), never in a candidate's,
and what it says is read as exit codes and a capped stderr tail. Invocation and exit codes as testlib's::

    ./checker input.txt output.txt answer.txt     # output: the candidate's stdout; answer: the jury's
    0 accepted · 1 wrong answer · 2 presentation error (4, 8: also the output's fault) · 3 the checker failed

A checker that fails (exit 3, a crash, its time or memory limit) is the problem's error, never the
candidate's fault: that test's verdict says nothing about the candidate (``PROBLEM_ERROR``); except a crash
(not exit 3) on an output when the same checker accepts the jury's answer as the output (``CRASHED``, then a
control run: ``judging.code_checkers.blame_crashes``): that output made it crash, and it is rejected. A checker is
compiled once for its content (the source, its files and the build's argv, hashed) and the sandbox image's
id: the binary is kept here and sent with each request that runs it, and kept on disk (``checker_cache``,
backend 'docker') for the processes that come later.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import threading

from bonforge.sandbox import checker_cache
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.wire import Limits, Status, rerun_stretches

BUILD_ARGV = ("g++", "-std=c++17", "-O2", "-pipe", "-o", "checker", "checker.cpp")
BUILD_TIME_S = 60.0  # CPU seconds to compile a checker (testlib.h is a large header)
CHECK_TIME_S = 10.0  # CPU seconds per run of a checker
MAX_BINARY = 32 << 20  # bytes of a compiled checker
MESSAGE_BYTES = 1 << 16  # a checker's stdout cap (its verdict text goes to stderr, of which a tail is kept)
PROBLEM_ERROR = "problem_error"  # a test whose checker failed: the problem's error, not the candidate's
CRASHED = "checker_crashed"  # the checker crashed on an output (not exit 3): the problem's error unless a control
# run of it on the jury's answer is accepted (then the output made it crash: wrong_answer)
ACCEPTED, WRONG = {0}, {1, 2, 4, 7, 8}  # testlib: ok; wa, pe, dirt, points, unexpected eof
PARTIAL = range(16, 117)  # testlib's partial scores (16 + points): not accepted
UNFINISHED_BUILD = "~"  # the prefix of a checker binary the machine kept from compiling (not "!": no error)

_binaries: dict[str, str] = {}  # hash of (image id, digest) -> base64 executable, or "!" + why it does not build
_lock = threading.Lock()
MAX_KEPT = 256  # compiled checkers kept in this process (the oldest dropped first)


def digest(checker: dict) -> str:
    """The checker's identity: its source, its files and the build's argv."""
    doc = [list(BUILD_ARGV), checker["source"], sorted(checker.get("files", {}).items())]
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()


def _base(cfg: CodeVerifyConfig, name: str) -> dict:
    return {"id": name, "kind": "stdio", "program": "", "prelude": "", "fn_name": None, "stop_on_failure": False,
            **Limits(CHECK_TIME_S, cfg.wall_factor, cfg.memory_mb, MESSAGE_BYTES).fields()}


def build_request(checker: dict, cfg: CodeVerifyConfig) -> dict:
    files = [{"name": "checker.cpp", "text": checker["source"]}]
    files += [{"name": n, "text": v} for n, v in sorted(checker.get("files", {}).items())]
    build = {"argv": list(BUILD_ARGV), "keep": "checker",
             **Limits(BUILD_TIME_S, cfg.wall_factor, cfg.memory_mb, MAX_BINARY).fields()}
    return dict(_base(cfg, "checker-build-" + digest(checker)[:16]), files=files, build=build, exec=["./checker"],
                tests=[])  # fmt: skip


def check_request(binary: str, items: list[tuple[str, str, str]], cfg: CodeVerifyConfig, name: str) -> dict:
    """One checker run per ``(input, output, answer)``, in one request (the binary sent once)."""
    tests = [{"input": "", "files": [{"name": "input.txt", "text": i}, {"name": "output.txt", "text": o},
                                     {"name": "answer.txt", "text": a}]} for i, o, a in items]  # fmt: skip
    return dict(_base(cfg, name), files=[{"name": "checker", "b64": binary, "executable": True}],
                exec=["./checker", "input.txt", "output.txt", "answer.txt"], tests=tests)


def reading(result: dict) -> tuple[str, str]:
    """(``passed`` | ``wrong_answer`` | ``PROBLEM_ERROR`` | ``CRASHED``, note) from one run of a checker."""
    said = (result.get("stderr") or result.get("error") or "").strip()[-300:]
    code = result.get("exit_code")
    if result.get("status") == Status.UNFINISHED:  # the machine's: nothing known of the checker nor the output
        return Status.UNFINISHED, f"the problem's checker did not finish: {said}"
    if result.get("status") in ("ok", "runtime_error") and code in ACCEPTED:
        return "passed", ""
    if result.get("status") == "runtime_error" and (code in WRONG or code in PARTIAL):
        kind = "presentation error" if code in (2, 4, 8) else "wrong answer"
        return "wrong_answer", f"the checker says {kind}" + (f": {said}" if said else "")
    what = "reported its own failure (exit 3)" if code == 3 else f"failed ({result.get('status')}" + (
        f", exit code {code})" if code is not None else ")")  # fmt: skip
    return PROBLEM_ERROR if code == 3 else CRASHED, f"the problem's checker {what}" + (f": {said}" if said else "")


class Checkers:
    """The checker programs of one verification call, run on a pool of their own (started on first use, with
    the call's ``pool_size``)."""

    def __init__(self, cfg: CodeVerifyConfig, pool=None):
        self.cfg = cfg
        self._pool = pool
        self._own = None
        self._start = threading.Lock()  # ``check`` is called from the candidates' pool threads

    def _run(self, requests: list[dict]) -> list[dict]:
        with self._start:
            if self._pool is None:
                from bonforge.sandbox.pool import SandboxPool

                # as many containers as the candidates have: the problems' checkers compile (testlib.h: seconds
                # of CPU each) side by side, then read each candidate's outputs as its outcome arrives
                self._own = self._pool = SandboxPool(self.cfg)
        return self._pool.run(requests)

    @functools.cached_property
    def image(self) -> str | None:
        """The id of the image that compiles and runs the checkers (None with backend 'process': the host's
        compiler, which nothing identifies, so its binaries are kept in this process only); asked of the
        engine once per ``Checkers``."""
        if self.cfg.backend != "docker":
            return None
        from bonforge.sandbox import image

        return image.image_id(image.ensure_image(self.cfg.image, self.cfg.build_image))

    def compile(self, checkers: list[dict]) -> list[str]:
        """The base64 binary of each checker, or ``"!" + why`` it does not build; built once per content and
        image (kept in this process, and on disk for later ones when the image is known)."""
        image = self.image
        keys = [hashlib.sha256(f"{image} {digest(c)}".encode()).hexdigest() for c in checkers]
        with _lock:
            todo = {k: c for k, c in zip(keys, checkers, strict=True) if k not in _binaries}
        for k in list(todo) if image else []:
            if (data := checker_cache.load(k, MAX_BINARY)) is not None:
                with _lock:
                    _binaries[k] = base64.b64encode(data).decode()
                del todo[k]
        unfinished = {}
        if todo:
            outcomes = self._alone_again([build_request(c, self.cfg) for c in todo.values()],
                                         lambda o: o.get("unfinished") is True)  # fmt: skip
            with _lock:
                for k, outcome in zip(todo, outcomes, strict=True):
                    if outcome.get("unfinished") is True:  # kept nowhere: the next call compiles it again
                        unfinished[k] = UNFINISHED_BUILD + "the problem's checker did not finish compiling: " + str(
                            (outcome.get("results") or [{}])[0].get("error", ""))[-500:]  # fmt: skip
                    elif outcome.get("artifact"):
                        _binaries[k] = outcome["artifact"]
                    else:
                        why = outcome.get("build_error") or outcome.get("sandbox_error") or outcome.get(
                            "runner_killed") or "no binary came back"  # fmt: skip
                        _binaries[k] = "!the problem's checker does not compile: " + why[-2000:]
                while len(_binaries) > MAX_KEPT:
                    del _binaries[next(iter(_binaries))]
            for k, outcome in zip(todo, outcomes, strict=True):
                if image and outcome.get("artifact"):  # a failed build is kept in this process only
                    try:
                        checker_cache.store(k, base64.b64decode(outcome["artifact"], validate=True))
                    except (ValueError, TypeError):  # not base64: running it will say so
                        pass
        with _lock:
            return [unfinished.get(k) or _binaries.get(k, "!the problem's checker was dropped from the cache; run "
                                                            "again") for k in keys]  # fmt: skip

    def _alone_again(self, requests: list[dict], unfinished) -> list[dict]:
        """The outcomes of ``requests``; each one the machine kept from finishing (``unfinished(outcome)``) run
        again alone, after the others, each time allowed to wait longer (``wire.rerun_stretches``), until it
        finishes or the last one (``judging.code`` does the same for candidates)."""
        outcomes = self._run(requests) if requests else []
        for n, request in enumerate(requests):
            for stretch in rerun_stretches(request["wall_limit"]) if unfinished(outcomes[n]) else ():
                outcomes[n] = self._run([dict(request, stretch=stretch)])[0]
                if not unfinished(outcomes[n]):
                    break
        return outcomes

    def check(self, jobs: list[tuple[str, list[tuple[str, str, str]]]]) -> list[list[tuple[str, str]]]:
        """For each ``(binary, items)``: per item the checker's reading (``reading``)."""
        requests = [check_request(b, items, self.cfg, f"checker-{n}") for n, (b, items) in enumerate(jobs)]
        out = []
        again = self._alone_again(requests, lambda o: any(r.get("status") == Status.UNFINISHED
                                                          for r in o.get("results") or ()))  # fmt: skip
        for (_, items), outcome in zip(jobs, again, strict=True):
            results = outcome.get("results")
            if not isinstance(results, list) or len(results) != len(items):
                why = outcome.get("sandbox_error") or outcome.get("runner_killed") or "no answer"
                out.append([(PROBLEM_ERROR, f"the problem's checker could not run: {why}"[:500])] * len(items))
            else:
                out.append([reading(r) for r in results])
        return out

    def close(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = self._pool = None
