"""Assert-style checks on the host: ``CheckHost``, the handle on one check server (``check_process.py``, in a
container of its own with backend ``docker``), and the checks' verdicts read back from it with bounded size and
checked shape. How a check is planned and replayed: ``check_process.py``'s docstring and the sandbox README.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

from bonforge.sandbox import codec
from bonforge.sandbox.check_process import KEEP_CHECKS, PLAN_TIME_S, _calls_ok
from bonforge.sandbox.wire import LOAD_STRETCH, Status, wall_limit

LATE = object()  # no answer within the host's wall net (``CheckHost._ask``)
VERDICTS = frozenset({"passed", "wrong_answer", "runtime_error", "timeout", "memory_limit", "output_limit"})


def _well_formed(answer, request: dict) -> bool:
    """Whether a check server's answer has the shape of one to ``request`` (it runs the dataset's code:
    never trusted)."""
    if type(answer) is not dict or answer.get("n") != request["n"]:
        return False
    op = request["op"]
    if "fault" in answer or "unknown" in answer:
        return type(answer.get("fault", "")) is str
    if op == "plan":
        return _calls_ok(answer.get("plan")) and type(answer.get("error")) is str
    if "more" in answer:
        return _calls_ok(answer["more"]) and type(answer.get("go_on")) is bool
    return answer.get("status") in VERDICTS and type(answer.get("error", "")) is str


class CheckHost:
    """The host's handle on one check server, restarted if it dies, hangs or misbehaves.

    The check is the dataset's code, not trusted: with ``cfg`` of backend ``docker`` the process runs in a
    container of its own (``check_argv``: no network, read-only root, its own pids and memory limits,
    an unprivileged uid, no capability), separate from every candidate's; without (or with backend
    ``process``) it runs on the host, as the candidates do with that backend. Its answers are read with
    bounded size and depth and checked for shape; a problem's check is known by a hash of its code.

    ``plan`` registers a check and returns its first plan (remembered: a check is planned once per process);
    ``replay`` judges one run of a program. A check's limit is its CPU (its timer, and the check server's
    count where the timer's signal is not handled: then the program's ``timeout``); the host's wall net for an
    answer is the item's time limit plus ``GRACE_S``, stretched ``LOAD_STRETCH`` times for a busy machine, and
    a replay with no answer within it is ``unfinished`` (the machine's: run again alone, then ``infra_error``),
    never remembered. Safe to call from several threads (one request at a time)."""

    GRACE_S = 5.0
    MEMO_ENTRIES = 4096  # verdicts remembered (oldest forgotten first)
    MEMO_BYTES = 1 << 16  # runs whose answers are longer than this are not remembered
    MAX_ANSWER = 16 << 20  # bytes of one answer line (a plan longer than this is the check's fault)

    def __init__(self, memory_mb: int, cfg=None):
        self.memory_mb = memory_mb
        self.cfg = cfg
        self._checks: dict[str, dict] = {}  # key -> the check's code and its first plan
        self._proc: subprocess.Popen | None = None
        self._name: str | None = None  # the container's, with backend docker
        self._buf = b""
        self._memo: dict[tuple, dict] = {}
        self._lock = threading.RLock()
        self._starts = 0
        self._sent = 0  # requests sent: each carries its number, each answer must carry it back

    def __enter__(self) -> CheckHost:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        self._starts += 1
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0", "LANG": "C.UTF-8"}
        if self.cfg is not None and self.cfg.backend == "docker":
            self._name = f"bonforge-chk-{os.getpid()}-{id(self):x}-{self._starts}"
            argv = check_argv(self.cfg, self.memory_mb, self._name)
        else:
            argv = [sys.executable, "-s", "-c", _SOURCE, os.path.dirname(codec.__file__), str(self.memory_mb)]
        self._buf = b""
        try:
            self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, env=env, start_new_session=True)  # fmt: skip
        except OSError:
            self._proc = None
            return
        timeout = self.cfg.startup_timeout_s if self.cfg is not None else 60.0
        if self._read(timeout) != {"event": "ready"}:
            self.close()

    def _read(self, timeout: float):
        """The next answer line, parsed; ``LATE`` when none came in time, None when it was too long or
        unreadable."""
        deadline = time.monotonic() + timeout
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if len(self._buf) > self.MAX_ANSWER:
                return None
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return LATE
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        if len(line) > self.MAX_ANSWER:
            return None
        try:
            return json.loads(line)
        except (ValueError, RecursionError, MemoryError):
            return None

    def _ask(self, request: dict, seconds: float) -> dict | None:
        """One request and its well-formed answer, within the wall net for a check of ``seconds`` of CPU;
        ``LATE`` (and the process ended) when no answer came within it, None when it died or answered out of
        shape. A process that lost the request's check gets it planned again."""
        timeout = wall_limit(seconds, 1.0, self.GRACE_S) * LOAD_STRETCH
        for _ in range(2):
            if self._proc is None:
                self._start()
                if self._proc is None:
                    return None
            answer = None
            self._sent += 1
            request = dict(request, n=self._sent)
            try:
                self._proc.stdin.write(json.dumps(request).encode() + b"\n")
                self._proc.stdin.flush()
                answer = self._read(timeout)
            except OSError:
                pass
            if answer is LATE or not _well_formed(answer, request):
                self.close()
                return answer if answer is LATE else None
            del answer["n"]
            if "unknown" not in answer:
                return answer
            known = self._checks.get(request["key"])
            if known is None:
                return None
            planned = self._ask(dict(known["code"], op="plan", key=request["key"]), PLAN_TIME_S)
            if planned is None or planned is LATE:
                return planned
        return None

    @staticmethod
    def key(context: str, check: str, entry: str) -> str:
        """A check's key: a hash of its code (two problems with the same code share their plans and verdicts)."""
        return hashlib.sha256(json.dumps([context, check, entry]).encode()).hexdigest()[:32]

    def plan(self, context: str, check: str, entry: str) -> dict:
        """``{"key": str, "plan": [...], "error": str}``, or ``{"key", "fault": str}`` when the check cannot run
        at all (it does not compile, or the process died, hung or misbehaved planning it)."""
        key = self.key(context, check, entry)
        with self._lock:
            known = self._checks.get(key)
            if known is None:
                code = {"context": context, "check": check, "entry": entry}
                for _ in range(2):  # once more on a fresh process: its death may not be the check's doing
                    answer = self._ask(dict(code, op="plan", key=key), PLAN_TIME_S)
                    if answer is not None and answer is not LATE:
                        break
                    answer = None
                answer = answer or {"fault": "the check server died, hung or misbehaved while planning, twice"}
                while len(self._checks) >= KEEP_CHECKS:
                    del self._checks[next(iter(self._checks))]
                known = self._checks[key] = {"code": code, "answer": answer}
            return dict(known["answer"], key=key)

    def replay(self, key: str, plan: list | None, calls: list[str], end: dict, time_limit: float, go_on: bool) -> dict:
        """The verdict of one run (``{"status", "error"}``) or ``{"more": plan, "go_on": bool}``: ``plan``
        (None: the first) and ``go_on`` as the run was asked, ``calls`` and ``end`` what it answered.
        A replay is a function of exactly these (the check is deterministic: fixed hash seed, ``random``
        seeded), so runs that answered alike share one replay (``_remembered``)."""
        memo_key = self._memo_key(key, plan, calls, end, time_limit, go_on)
        with self._lock:
            if memo_key in self._memo:
                return dict(self._memo[memo_key])
            item = {"op": "replay", "key": key, "plan": plan, "calls": calls, "end": end, "time_limit": time_limit,
                    "go_on": go_on}  # fmt: skip
            answer = self._ask(item, time_limit)
            if answer is LATE:  # the machine kept the check from answering (it is restarted): not remembered
                return {"status": Status.UNFINISHED.value, "error": "the check did not finish on the program's "
                        "answers: the machine was too busy"}  # fmt: skip
            if answer is None:  # the process died or misbehaved (it is restarted): not remembered
                return {"status": "timeout", "error": "the check did not finish on the program's answers"}
            if "fault" in answer:
                error = f"the check failed on the program's answers: {answer['fault']}"
                answer = {"status": "runtime_error", "error": error}
            return self._remembered(memo_key, answer)

    def _memo_key(self, key: str, plan: list | None, calls: list[str], end: dict, time_limit: float, go_on: bool):
        """What a replay depends on, as a hashable key; None for runs too long to remember."""
        if sum(map(len, calls)) > self.MEMO_BYTES or plan is not None and len(plan) > 1000:
            return None
        return (key, None if plan is None else json.dumps(plan), tuple(calls), end["status"], end.get("error", ""),
                time_limit, go_on)  # fmt: skip

    def _remembered(self, memo_key: tuple | None, answer: dict) -> dict:
        if memo_key is not None:
            if len(self._memo) >= self.MEMO_ENTRIES:
                del self._memo[next(iter(self._memo))]
            self._memo[memo_key] = dict(answer)
        return answer

    def close(self) -> None:
        """End the process (and its container): EOF on its input, then a kill."""
        with self._lock:
            proc, self._proc = self._proc, None
            name, self._name = self._name, None
        if proc is None:
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if name is not None:  # a check that ignores EOF (or hangs) keeps its container running: remove it
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
        proc.stdout.close()


# the check server's program, read once on the host (it runs with ``python -c``)
_SOURCE = Path(__file__).with_name("check_process.py").read_text(encoding="utf-8")


def check_argv(cfg, memory_mb: int, name: str) -> list[str]:
    """``docker run`` of a check server in a container of its own: what a check may reach is that
    container (no network, read-only root, a small /tmp, pids and memory limits, uid 65534 with no
    capability), never the host or a candidate's sandbox. The image is the sandbox's (its Python and
    ``runner.py``, the value codec), built if missing."""
    from bonforge.sandbox import image as image_mod

    tag = image_mod.ensure_image(cfg.image, cfg.build_image)
    mem = memory_mb + 64
    return [
        "docker", "run", "-i", "--rm", "--init", "--name", name,
        *[a for k, v in image_mod.labels().items() for a in ("--label", f"{k}={v}")],
        "--network", "none", "--read-only", "--tmpfs", "/tmp:rw,nosuid,nodev,noexec,size=16m",
        "--memory", f"{mem}m", "--memory-swap", f"{mem}m", "--pids-limit", str(CHECK_PIDS), "--cpus", "1",
        "--ipc", "private", "--user", "65534:65534", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--workdir", "/tmp", "--env", "HOME=/tmp", "--env", "PYTHONHASHSEED=0", "--env", "LANG=C.UTF-8",
        "--log-driver", "none",
        tag, "python3", "-s", "-c", _SOURCE, os.path.dirname(image_mod.RUNNER_IN_IMAGE), str(memory_mb), "contained",
    ]  # fmt: skip


CHECK_PIDS = 16  # processes and threads of a check container (a check's fork bomb stops there)

_shared: dict[tuple, CheckHost] = {}
_shared_lock = threading.Lock()


def shared_check_host(cfg) -> CheckHost:
    """This process's check host for ``cfg``'s sandbox settings (started on first use, reused by every later
    call: a reward function does not start a container per call), closed at interpreter exit."""
    key = (cfg.backend, cfg.image, cfg.memory_mb)
    with _shared_lock:
        host = _shared.get(key)
        if host is None:
            host = _shared[key] = CheckHost(cfg.memory_mb + 512, cfg)
    return host


def close_check_hosts() -> None:
    """Stop this process's check hosts (``shared_check_host``) now: a build's end and interpreter exit."""
    with _shared_lock:
        hosts = list(_shared.values())
        _shared.clear()
    for host in hosts:
        host.close()


atexit.register(close_check_hosts)
