#!/usr/bin/env python3
"""bonforge sandbox runner: a long-lived process that runs untrusted programs against test inputs.

Standalone (Python 3 standard library only): the sandbox image carries a copy at
``/opt/bonforge/runner.py`` and the ``process`` backend starts this same file on the host.

Protocol: one JSON object per line, over stdin/stdout or, with ``--connect PATH``, over a Unix socket
the host listens on (the Docker backend: it skips the proxies of Docker's attach stream). The runner
first writes ``{"event": "ready", ...}``; then for each request line it writes one response line. Both are the
typed records of ``wire.py`` (``Request``, ``Answer``, ``Result``): a request is checked field by field when it
is read, and one out of shape is answered ``{"id": ..., "error": "bad request: <the field, what it must be>"}``
(then the runner exits, as after any fault). A request::

    {"id": ..., "kind": "stdio" | "call" | "assert", "program": str, "prelude": str, "fn_name": str,
     "tests": [{"input": str} | {"args": [json...]} | {"calls": [[[value...], {name: value}], ...],
               "go_on": bool}],
     "time_limit": s, "wall_limit": s, "memory_mb": int, "output_limit": bytes, "stop_on_failure": bool,
     "budget": s}

A native program (C++, Java, PyPy: ``languages.py`` on the host) adds ``"files": [{"name", "text"} | {"name",
"b64", "executable"}]`` (written into the work directory as the sandbox uid), ``"build": {"argv", "time_limit",
"wall_limit", "memory_mb", "output_limit"[, "keep"]}`` (run once, in the sandbox, before the tests: a failure
answers every test ``compile_error`` with the compiler's message, also in ``build_error``; ``keep`` names a
file whose bytes come back base64 in ``artifact``), ``"exec": [argv]`` (each test's child execs it) and
``"address_limit": bool`` (RLIMIT_AS, off for a JVM). A test may carry its own ``files`` (a checker's input,
output and answer). Its results add ``exit_code`` (negative: the signal).

``budget`` (optional): the wall-clock seconds all the request's tests may take together; each test's wall
limit is cut to what is left, and once nothing is left the remaining tests are not run (``timeout``).
``stop_on_timeout`` (optional): stop at the first test that runs out of time (the judge's short first pass,
``judging.passes.probe``: such a request runs again with its own limits).

An ``assert`` test is a list of calls of ``fn_name`` (arguments in the tagged form of ``encode_value``),
planned by the check process (``check_host.py``, in a container of its own: the check is the dataset's code, not
trusted): the check's code and expected values never enter the candidate's sandbox. The child makes the
calls in order and stops at the first one that raises unless ``go_on``. A response:
``{"id": ..., "results": [...], "clean": bool, "cleanup": str}`` with one result per test run:
``{"status": "ok" | "runtime_error" | "compile_error" | "timeout" | "memory_limit" | "output_limit" |
"unfinished", "stdout": str, "stderr": str, "error": str, "cpu_s": float, "wall_s": float, "wait_s": float}``
(``wait_s``: the part of ``wall_s`` its processes waited for a CPU; ``unfinished``: the machine kept it from
finishing, ``wire.LOAD_STRETCH`` or the request's ``stretch`` (optional: a run alone, ``wire.rerun_stretches``);
a build kept from finishing makes every test unfinished and adds ``"unfinished": true`` to the response) plus, for
``call``, ``"value"`` (the tagged JSON text of the returned value) and, for ``assert``, ``"calls"``: one
line per call made, ``"v <tagged JSON>"`` or ``"x <JSON [exception class, message]>"``. Every field the
child supplies is capped here (stdout and the call lines together under ``output_limit``) and passed on
as text, never parsed: the host parses it with bounded size and depth. The runner never sees expected
outputs: the host judges.

The child reports on a result pipe (fd 3) with one line per event: ``v``/``x`` (a call's value or
exception), ``d`` (all calls made), ``e <text>`` (the program failed), ``m`` (MemoryError). Anything it
writes there is only a claim about its own behaviour, judged on the host. Set-up failures travel on a
separate pipe that the child closes before the program runs, so a program cannot forge one.

Three kinds of process. The *supervisor* (this process: the host channel, limits, results) forks, before
it reads any request, a *zygote*: a warm interpreter (common modules preloaded) that never holds a
candidate's data and does nothing but fork. The program is compiled once per request in the supervisor (a
syntax error answers every test without a fork) and handed, marshalled in a memory file, to each test's
*child*, forked from the zygote: own session, the sandbox uid with no capabilities (``--uid``: the
supervisor and the zygote run as root, and the candidate cannot signal, ptrace or ``prlimit`` them),
rlimits, stdin a memory file holding the test's input (``os.fstat(0).st_size`` is its length),
stdout/stderr drained continuously with a cap. The program runs as a script would: its namespace is the
module ``sys.modules["__main__"]`` (``solution`` for call and assert kinds) with the builtins module as
its ``__builtins__``, the standard streams are CPython's (buffered, the same objects as ``sys.__stdout__``
& co., with their ``mode``); stdout and stderr are pipes the test's uid may reopen (``/dev/stdout``); for
call and assert kinds stdout is ``/dev/null`` (prints are ignored). A stdio program ends as the interpreter
would: non-daemon threads joined, ``atexit`` handlers run, the namespace dropped and garbage collected
(files it left open are flushed, ``__del__`` runs), streams flushed; ``SystemExit`` gives CPython's exit
status. The zygote is a child subreaper, so every descendant of a test ends up its child: it reaps them
all and sums their CPU time; inside a container the supervisor also polls the cgroup's CPU counter, so
CPU spent by any process counts while the test runs.
After each test every process of the candidate is killed (none survives into the next test); after each
request the work directory, ``/dev/shm`` and ``/dev/mqueue`` are emptied and the supervisor checks that the
zygote's limits, affinity and priority (what every test inherits) are as they were; otherwise it answers
``clean: false`` and exits (the host replaces the sandbox).
"""

import base64
import dataclasses
import errno
import fcntl
import json
import marshal
import os
import select
import selectors
import signal
import socket
import stat
import sys
import time

# Modules that solutions commonly import: loaded once here, inherited by every forked child.
import bisect, collections, copy, decimal, fractions, functools, heapq, io, itertools  # noqa: E401,F401
import math, operator, random, re, statistics, string, typing  # noqa: E401,F401

import oskit
from wire import LOAD_STRETCH, Answer, Request, Result, Status
from zygote import MEM_EXIT, serve, compile_program

STDERR_KEEP = 4096
# What a runtime writes to stderr when an allocation fails (C++, the JVM, PyPy, the C library's perror): a failed
# run that reports one is memory_limit (one that exits 0 is judged on its output, whatever it wrote).
OUT_OF_MEMORY = (b"std::bad_alloc", b"java.lang.OutOfMemoryError", b"MemoryError", b"Cannot allocate memory",
                 b"insufficient memory for the Java Runtime")
# Signals the runner blocks (a program may not stop it with them); each child unblocks them.
BLOCKED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
                   signal.SIGALRM, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGXCPU, signal.SIGXFSZ)


def _holds(fd, size):
    """Make the pipe ``fd`` hold ``size`` bytes if the kernel allows it: then its writer never waits for a
    reader below that size, and the supervisor need not wake up for every line a child writes (it reads
    the pipe whenever it wakes, at least every poll interval, and once the child is done)."""
    if size > oskit.PIPE_HOLD_MAX:  # (with CAP_SYS_RESOURCE the kernel's own cap would not apply)
        return False
    try:
        return fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size) >= size
    except (OSError, AttributeError):  # over /proc/sys/fs/pipe-max-size, or the user's pipe quota
        return False


def _writable_by_all(fd):
    """Let any uid open the pipe ``fd`` for writing through /proc (``/dev/stdout`` is ``/proc/self/fd/1``):
    the test runs as another uid than the pipe's owner. Reopening through /proc needs access to a process
    holding it, which only the test's own processes give (the runner's are root and not dumpable)."""
    st = os.fstat(fd)
    if stat.S_ISFIFO(st.st_mode) and st.st_uid == os.geteuid():
        os.fchmod(fd, 0o622)


def _stdin_file(data):
    """The test's input as a memory file (a regular file: its size is known, reads never block)."""
    fd = os.memfd_create("stdin", os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class _Stuck(Exception):
    """A test's processes could not all be killed and reaped: this sandbox cannot run another test."""


class _Unfinished(Exception):
    """A build the machine kept from finishing (``Status.UNFINISHED``): no verdict on the program."""


class _Sandbox:
    """The supervisor's side of the zygote, forked before any request is read, and of the clean-up."""

    def __init__(self, ids, nproc, contained, own_ipc, cgroup):
        self.ids, self.contained, self.own_ipc, self.cgroup = ids, contained, own_ipc, cgroup
        self.scanned = {}  # backend process: shared scratch directory -> its mtime when last cleaned
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            self.sock.close()
            serve(theirs, ids, nproc)
        theirs.close()
        self.state = oskit.fingerprint(self.pid)  # what every test's process inherits
        self.scheduling = oskit.scheduling(self.pid)  # likewise: a test keeping it waits for the machine

    def start(self, index, fds):
        self.wstatus = self.cpu = None
        socket.send_fds(self.sock, [b"%d" % index], fds)

    def receive(self):
        msg = self.sock.recv(64).split()
        if not msg:
            raise RuntimeError("the zygote died")
        if msg[0] == b"E":
            raise RuntimeError("the zygote could not fork")
        self.wstatus = int(msg[1])
        if msg[0] == b"D":
            self.cpu = float(msg[2])

    def survivors(self):
        """Processes of the candidate still alive: in a container everything but init, us and the zygote."""
        if self.contained:
            return {int(n) for n in os.listdir("/proc") if n.isdigit()} - {1, os.getpid(), self.pid}
        return oskit.descendants(self.pid)

    def finish(self, timeout=5.0):
        """Kill every process of the test; wait until the zygote has reaped them all."""
        deadline = time.monotonic() + timeout
        waited = self.wstatus is not None  # the child has exited: the zygote is about to report
        while self.cpu is None:
            if waited and select.select([self.sock], [], [], 0.005)[0]:
                self.receive()
                continue
            waited = True
            os.kill(self.pid, signal.SIGCONT)  # without uid separation a program may have stopped the zygote
            for pid in self.survivors():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise _Stuck(f"processes of the program survived SIGKILL for {timeout:.0f} s")

    def cleanup(self, workdir):
        """Empty the work directory and shared scratch places; what is still not as it was, if anything."""
        problems = []
        used = [d for d in (workdir, *oskit.SCRATCH_DIRS) if (d == workdir or self.contained) and oskit.listdir(d)]
        wiped = True
        with oskit.as_uid(self.ids):
            for d in used:
                wiped = oskit.empty_dir(d) and wiped
            if self.ids and not self.contained:
                for d in oskit.HOST_SCRATCH_DIRS:  # scanned only when changed since the last look (a new entry)
                    if oskit.mtime(d) != self.scanned.get(d):
                        oskit.remove_owned(d, self.ids[0], workdir)
                        self.scanned[d] = oskit.mtime(d)
        if not wiped:
            problems.append("work directory, /dev/shm or /dev/mqueue not empty")
        if self.own_ipc:  # System V objects of this sandbox's IPC namespace only
            for path in oskit.SYSV_IPC:
                try:
                    with open(path, "rb") as f:
                        if len(f.read().splitlines()) > 1:
                            problems.append(f"System V IPC objects left ({path})")
                except OSError:
                    pass
        if oskit.fingerprint(self.pid) != self.state:
            problems.append("the zygote's limits, affinity or priority changed")
        return problems

    def close(self):
        self.sock.close()
        for pid in [*self.survivors(), self.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def run_test(req, index, test, payload_fd, sandbox, wall_limit=None, cap=None):
    """Run test ``index`` of ``req`` (a ``Request``): its ``Result``. ``wall_limit``: the test's (the request's,
    or what is left of its budget), ``cap``: the real time the machine may stretch it to (``LOAD_STRETCH``)."""
    stdin_r = _stdin_file(test.get("input", "").encode())
    if req.kind == "stdio":
        out_r, out_w = os.pipe()
    else:  # the returned values are judged: prints are ignored (as the reference harnesses do), never capped
        out_r, out_w = None, os.open(os.devnull, os.O_WRONLY)
    err_r, err_w = os.pipe()
    for fd in (out_w, err_w):  # the test's uid may reopen them (/dev/stdout, /proc/self/fd/1), no one else can
        _writable_by_all(fd)
    res_r, res_w = os.pipe()
    quiet = _holds(res_w, req.output_limit)  # then read on other wake-ups only, not for each line
    setup_r, setup_w = os.pipe()
    # A container's cgroup counts the CPU of every process, reaped or not: polled while the test runs.
    cgroup_before = oskit.cgroup_cpu() if sandbox.contained else None
    oom_before, self_before = oskit.oom_kills(), oskit.self_cpu()
    # the test's own memory cgroup: its child joins it before the program runs
    joins = [sandbox.cgroup.enter(req.memory_mb)] if sandbox.cgroup else []
    forking = oskit.cpu_wait([sandbox.pid], sandbox.scheduling)  # the zygote's wait to fork counts too
    start = time.monotonic()
    sandbox.start(index, [stdin_r, out_w, err_w, res_w, setup_w, payload_fd, *joins])
    for fd in (stdin_r, out_w, err_w, res_w, setup_w, *joins):
        os.close(fd)
    limit = req.output_limit
    cpu_limit = float(req.time_limit)
    out, err, res = bytearray(), bytearray(), bytearray()
    sel = oskit.selector()
    zfd = sandbox.sock.fileno()
    sel.register(zfd, selectors.EVENT_READ)
    drained = [fd for fd in (out_r, err_r, res_r) if fd is not None]
    for fd in drained:
        os.set_blocking(fd, False)
        if not (quiet and fd == res_r):
            sel.register(fd, selectors.EVENT_READ)
    # The wall limit counts the program's own time: the machine's (its processes waiting for a CPU) is added
    # to the deadline, up to the cap; at the cap a test short of its own limits is UNFINISHED (``wire``).
    wall_limit = float(req.wall_limit if wall_limit is None else wall_limit)
    deadline = start + wall_limit
    cap = start + (wall_limit * _stretch(req) if cap is None else cap)  # the most real time the machine may take
    poll = 0.1 if cgroup_before is not None else 1.0
    killed, waited, live, measured = None, 0.0, True, start
    try:
        while sandbox.wstatus is None:
            now = time.monotonic()
            if now >= deadline or now - measured > poll:  # at most once a poll interval, and at the deadline
                measured, live = now, sandbox.survivors()
                wait = oskit.cpu_wait(live, sandbox.scheduling)
                waited = max(waited, wait and wait + oskit.cpu_wait([sandbox.pid], sandbox.scheduling) - forking)
            if now >= deadline and not live and now < cap:  # the program has ended: the zygote is reporting
                os.kill(sandbox.pid, signal.SIGCONT)  # (one a program stopped, without uid separation)
                deadline = min(now + 0.01, cap)
            elif now >= deadline:
                if now - start - waited >= wall_limit or now >= cap:
                    killed = Status.TIMEOUT if now - start - waited >= wall_limit else Status.UNFINISHED
                    break
                deadline = min(start + wall_limit + waited, cap)
            if cgroup_before is not None and now - start > poll:
                if oskit.cgroup_cpu() - cgroup_before - (oskit.self_cpu() - self_before) > cpu_limit:
                    killed = Status.TIMEOUT
                    break
            for key, _ in sel.select(min(deadline - now, poll)):
                fd = key.fd
                if fd == zfd:
                    sandbox.receive()
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    sel.unregister(fd)
                elif fd == err_r:
                    err += chunk
                    del err[:-STDERR_KEEP]
                else:
                    (out if fd == out_r else res).extend(chunk)
            if quiet:
                try:
                    res += os.read(res_r, limit + 1)
                except BlockingIOError:
                    pass
            if len(out) + len(res) > limit:
                killed = Status.OUTPUT_LIMIT
                break
    finally:
        for fd in list(sel.get_map()):
            sel.unregister(fd)
    sandbox.finish()
    try:
        oom = sandbox.cgroup.leave() if sandbox.cgroup else False
    except OSError as e:
        raise _Stuck(f"the test's memory cgroup could not be read or removed ({e.strerror})") from None
    oom = oom or oskit.oom_kills() > oom_before  # the container's own limit (or, without a test cgroup, its only one)
    for fd in drained:  # what is already buffered
        for _ in range(64):
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            (out if fd == out_r else err if fd == err_r else res).extend(chunk)
            del err[:-STDERR_KEEP]
            if len(out) + len(res) > limit:
                killed = killed or Status.OUTPUT_LIMIT
                break
    setup = os.read(setup_r, 1000)
    for fd in (*drained, setup_r):
        os.close(fd)
    if setup:
        raise RuntimeError(f"child setup failed: {setup.decode(errors='replace')}")
    wall = time.monotonic() - start
    cpu, wstatus = sandbox.cpu, sandbox.wstatus  # every process of the test reaped: all their CPU counted
    lines = bytes(res).decode("utf-8", "replace").splitlines() if len(out) + len(res) <= limit else []
    events = {ln[:1] for ln in lines}
    sig = os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus) else 0
    code = os.WEXITSTATUS(wstatus) if os.WIFEXITED(wstatus) else None
    result = {"cpu_s": round(cpu, 4), "wall_s": round(wall, 4), "wait_s": round(min(waited, wall), 4)}
    native = req.exec is not None  # a compiled program (or a compiler): its exit status is reported
    if native:
        result["exit_code"] = code if code is not None else -sig
    kind = req.kind
    if kind == "call":
        values = [ln[2:] for ln in lines if ln.startswith("v ")]
        if values:
            result["value"] = values[0]
    elif kind == "assert":
        result["calls"] = [ln for ln in lines if ln.startswith(("v ", "x "))]
    if killed == Status.OUTPUT_LIMIT or len(out) + len(res) > limit:
        status = Status.OUTPUT_LIMIT
    elif killed == Status.TIMEOUT or cpu > cpu_limit or sig == signal.SIGXCPU:
        status = Status.TIMEOUT
    elif killed == Status.UNFINISHED:
        status = Status.UNFINISHED
        result["error"] = (f"not finished: {wall:.1f} s of wall time, {min(waited, wall):.1f} s of it waiting for "
                           f"a CPU (the machine's), {cpu:.2f} s of CPU: the machine was too busy")
    elif oom or oskit.oom_kills() > oom_before or code != 0 and (
            "m" in events and not native or code == MEM_EXIT and not native
            or native and any(mark in err for mark in OUT_OF_MEMORY)):  # fmt: skip
        status = Status.MEMORY_LIMIT
    elif code == 0 and "e" not in events and (kind == "stdio" or "value" in result or "d" in events):
        status = Status.OK
    else:
        status = Status.RUNTIME_ERROR
        errors = [ln[2:502] for ln in lines if ln.startswith("e ")]
        result["error"] = errors[0] if errors else (f"killed by signal {sig}" if sig else f"exit code {code}")
        if not errors and code == 0:
            result["error"] = "the program ended without answering"
    result["status"] = status
    result["stdout"] = bytes(out[:limit]).decode("utf-8", "replace") if status == Status.OK else ""
    result["stderr"] = bytes(err[-STDERR_KEEP:]).decode("utf-8", "replace")
    return Result(**result)


def _note(req, status, error):
    """The result of a test that did not run (``status``, ``error``)."""
    return Result(status, error=error, calls=[] if req.kind == "assert" else None)


def _create(workdir, name, mode):
    """Open ``name`` (a path of up to 8 names, a problem package's header tree) under ``workdir`` for writing,
    making its folders; links are never followed."""
    names = name.split("/")
    if len(names) > 8 or any(n in ("", ".", "..") for n in names):
        raise ValueError(f"bad file name {name[:50]!r}")
    dfd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for folder in names[:-1]:
            try:
                os.mkdir(folder, 0o755, dir_fd=dfd)
            except FileExistsError:
                pass
            sub = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
            os.close(dfd)
            dfd = sub
        return os.open(names[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode, dir_fd=dfd)
    finally:
        os.close(dfd)


def _write_files(files, workdir, ids):
    """Write a request's or a test's files into the work directory, as the sandbox uid (the clean-up, which
    runs as that uid, can remove them): ``{"name", "text"}`` or ``{"name", "b64", "executable"}``."""
    with oskit.as_uid(ids):
        for f in files:
            data = f["text"].encode("utf-8", "surrogatepass") if "text" in f else base64.b64decode(f["b64"])
            fd = _create(workdir, f["name"], 0o755 if f.get("executable") else 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)


def _payload_fd(payload):
    fd = os.memfd_create("bonforge-request", os.MFD_CLOEXEC)
    view = memoryview(marshal.dumps(payload))
    while view:
        view = view[os.write(fd, view) :]
    return fd


def _build(req, workdir, sandbox):
    """Compile a native program once for the request, in the sandbox under the build's own limits:
    (None, artifact) when it built (the ``keep`` file's bytes, base64, when asked for), else (the compiler's
    message, None)."""
    build = req.build
    payload = {"kind": "stdio", "time_limit": build.time_limit, "memory_mb": build.memory_mb,
               "file_limit": build.file_limit or req.file_limit, "argv": build.argv,
               "address_limit": _address_limit(req, sandbox), "workdir": workdir,
               "tests": [{"input": ""}]}  # fmt: skip
    breq = Request(req.id, "stdio", payload["tests"], build.time_limit, build.wall_limit, build.memory_mb,
                   build.output_limit, exec=build.argv, stretch=req.stretch)  # fmt: skip
    pfd = _payload_fd(payload)
    try:
        res = run_test(breq, 0, payload["tests"][0], pfd, sandbox)
    finally:
        os.close(pfd)
    if res.status == Status.UNFINISHED:
        raise _Unfinished(f"the build did not finish: {res.error}")
    if res.status != Status.OK:
        why = {Status.TIMEOUT: f"the compiler ran over its time limit ({float(build.time_limit):g} s)",
               Status.MEMORY_LIMIT: f"the compiler ran out of memory ({build.memory_mb} MiB)",
               Status.OUTPUT_LIMIT: "the compiler's output ran over its limit"}.get(res.status)  # fmt: skip
        message = (res.stderr or res.error or "").strip()
        return ((why + "\n" if why else "") + message)[-4000:] or f"the build failed ({res.status})", None
    keep = build.keep
    if not keep:
        return None, None
    try:
        with open(os.path.join(workdir, keep), "rb") as f:
            data = f.read(build.output_limit + 1)
    except OSError as e:
        return f"the build made no {keep!r} ({e.strerror})", None
    if len(data) > build.output_limit:
        return f"the build's {keep!r} is over {build.output_limit} bytes", None
    return None, base64.b64encode(data).decode()


def _stretch(req):
    """How many times its wall limit a run of ``req`` may take in real time (``wire.LOAD_STRETCH``)."""
    return float(req.stretch or LOAD_STRETCH)


def _address_limit(req, sandbox):
    """Whether a test's processes get RLIMIT_AS: only where no test cgroup binds them all (a JVM never: it
    reserves far more address space than it uses, and PyPy cannot start under 64 MiB of it)."""
    return req.address_limit and sandbox.cgroup is None


def handle(req, workdir, sandbox):
    """Run ``req`` (a ``Request``): its ``Answer``."""
    tests = req.tests
    payload = {"kind": req.kind, "fn_name": req.fn_name, "time_limit": req.time_limit, "memory_mb": req.memory_mb,
               "file_limit": req.file_limit, "address_limit": _address_limit(req, sandbox)}  # fmt: skip
    artifact = failure = None
    if req.exec is not None:  # a native program (C++, Java, PyPy, ...): its files, then its build, once
        _write_files(req.files, workdir, sandbox.ids)
        if req.build is not None:
            try:
                failure, artifact = _build(req, workdir, sandbox)
            except _Unfinished as e:  # every test unfinished: the host runs the request again, or says so
                results = [_note(req, Status.UNFINISHED, str(e)) for _ in tests]
                problems = sandbox.cleanup(workdir)
                return Answer(req.id, results, not problems, "; ".join(problems), unfinished=True)
        payload["argv"] = req.exec
    else:
        try:
            payload["source"], payload["code"] = compile_program(req)
        except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError) as e:
            failure = f"{type(e).__name__}: {e}"[:1000]
    if failure is not None:
        results = [Result(Status.COMPILE_ERROR, error=failure) for _ in tests[: 1 if req.stop_on_failure else None]]
        problems = sandbox.cleanup(workdir)
        return Answer(req.id, results, not problems, "; ".join(problems), build_error=failure)
    payload.update(tests=tests, workdir=workdir)
    problems = []
    results = []
    pfd = _payload_fd(payload)
    wall_limit, budget = float(req.wall_limit), req.budget
    try:
        # the budget counts the program's own time (a test's wall less its wait for a CPU), its cap real time
        begun, own, stretch = time.monotonic(), 0.0, _stretch(req)
        for i, test in enumerate(tests):
            left = wall_limit if budget is None else float(budget) - own
            cap = wall_limit * stretch
            if budget is not None:
                cap = min(cap, float(budget) * stretch - (time.monotonic() - begun))
            if left <= 0 or cap <= 0:  # the candidate's budget ran out (timeout), or the machine took it
                note = _note(req, Status.TIMEOUT, f"not run: the candidate's time budget ({float(budget):.1f} s) "
                             "ran out") if left <= 0 else _note(req, Status.UNFINISHED, "not run: the machine was "
                             f"too busy (the candidate's budget stretched {stretch:g} times ran out)")  # fmt: skip
                results += [note] * (len(tests) - i)
                break
            if test.get("files"):
                _write_files(test["files"], workdir, sandbox.ids)
            res = run_test(req, i, test, pfd, sandbox, min(wall_limit, left), cap)
            own += res.wall_s - res.wait_s
            if left < wall_limit and res.status == Status.TIMEOUT:
                res = dataclasses.replace(res, error=f"the candidate's time budget ({float(budget):.1f} s) ran out")
            results.append(res)
            stop = req.stop_on_failure or res.status in (Status.TIMEOUT, Status.UNFINISHED) and req.stop_on_timeout
            if stop and res.status != Status.OK:
                break
    except _Stuck as e:
        problems.append(str(e))
        results += [_note(req, Status.RUNTIME_ERROR, f"not run: {e}")] * (len(tests) - len(results))
    finally:
        os.close(pfd)
    problems += sandbox.cleanup(workdir)
    return Answer(req.id, results, not problems, "; ".join(problems), artifact=artifact)


def _ids(argv):
    """``--uid UID:GID``: the uid and gid the tests run under (the runner itself stays root)."""
    if "--uid" not in argv:
        return None
    uid, _, gid = argv[argv.index("--uid") + 1].partition(":")
    return int(uid), int(gid or uid)


def main():
    contained = "--contained" in sys.argv
    ids = _ids(sys.argv)
    nproc = int(sys.argv[sys.argv.index("--nproc") + 1]) if "--nproc" in sys.argv else None
    sys.set_int_max_str_digits(0)  # inherited: programs may print and read integers of any length
    signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED_SIGNALS)
    oskit.prctl(oskit.PR_SET_DUMPABLE, 0)  # programs may not read our memory through /proc
    oskit.prctl(oskit.PR_SET_CHILD_SUBREAPER, 1)  # should the zygote die, its orphans are still ours to kill
    private = "--private-tmp" in sys.argv
    if private:
        oskit.private_scratch(int(sys.argv[sys.argv.index("--private-tmp") + 1]))
    if not contained:  # imported only here: a container's zygote (forked below) is smaller without them
        import shutil
        import tempfile
    workdir = "/tmp" if contained else tempfile.mkdtemp(prefix="bonforge-run-")
    if ids and not contained:
        os.chown(workdir, *ids)
    if "--connect" in sys.argv:  # the host's socket (Docker: a bypass of the attach stream's proxies)
        path = sys.argv[sys.argv.index("--connect") + 1]
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
        except OSError as e:
            sys.exit(f"bonforge runner: cannot connect to the host's socket {path} ({e}); is the Docker daemon "
                     "on another host? Then set transport: attach")  # fmt: skip
        proto_in, proto_out = conn.makefile("rb"), conn.makefile("wb")
    else:
        proto_in = os.fdopen(os.dup(0), "rb")
        proto_out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    os.close(null)
    # What every child needs, done once here and inherited (cheaper than per child: fewer pages copied).
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"})
    # The standard streams as CPython makes them for a script whose stdout is a pipe (buffered, a
    # BufferedWriter under the text layer: partial writes are retried, ``.buffer.raw`` exists), and the
    # same objects as sys.__stdout__ & co., so writes through either keep their order.
    streams = [io.TextIOWrapper(buffered(io.FileIO(fd, mode, closefd=False)), encoding="utf-8", errors=errors,
                                line_buffering=fd == 2)
               for fd, mode, buffered, errors in ((0, "r", io.BufferedReader, "surrogateescape"),
                                                  (1, "w", io.BufferedWriter, "surrogateescape"),
                                                  (2, "w", io.BufferedWriter, "backslashreplace"))]  # fmt: skip
    for stream, mode in zip(streams, "rww"):
        stream.mode = mode  # as open() sets it (fast-I/O templates read it)
    sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams
    guarded = oskit.set_oom_score_adj(oskit.OOM_RUNNER)  # the supervisor, and the zygote forked below

    mount = sys.argv[sys.argv.index("--memory-cgroup") + 1] if "--memory-cgroup" in sys.argv else None
    cgroup = oskit.TestCgroup.find(mount) if mount else None
    # before any request: the zygote never holds one
    sandbox = _Sandbox(ids, nproc, contained, own_ipc=contained or private, cgroup=cgroup)

    def send(obj):
        proto_out.write(json.dumps(obj).encode() + b"\n")
        proto_out.flush()

    send({"event": "ready", "pid": os.getpid(), "python": sys.version.split()[0], "workdir": workdir,
          "oom_guard": guarded, "test_cgroup": cgroup is not None})
    try:
        for line in proto_in:
            doc = None
            try:
                doc = json.loads(line)
                req = Request.read(doc)
            except (ValueError, RecursionError) as e:  # a request out of shape (WireError): said, not run
                send({"id": doc.get("id") if isinstance(doc, dict) else None, "error": f"bad request: {e}"[:2000]})
                break
            del line, doc
            try:
                answer = handle(req, workdir, sandbox)
            except Exception as e:  # a runner fault: the host decides whose (a control program)
                answer = Answer(req.id, error=f"{type(e).__name__}: {e}"[:2000])
            send(answer.doc())
            if not answer.clean:
                break  # after a fault or a failed cleanup, this sandbox is not reused
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        sandbox.close()
        if not contained:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except OSError as e:
        if e.errno != errno.EPIPE:
            raise
