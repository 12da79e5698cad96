#!/usr/bin/env python3
"""bonforge sandbox runner: a long-lived process that runs untrusted programs against test inputs.

Standalone (Python 3 standard library only): the sandbox image carries a copy at
``/opt/bonforge/runner.py`` and the ``process`` backend starts this same file on the host.

Protocol: one JSON object per line, over stdin/stdout or, with ``--connect PATH``, over a Unix socket
the host listens on (the Docker backend: it skips the proxies of Docker's attach stream). The runner
first writes ``{"event": "ready", ...}``; then for each request line it writes one response line. A
request::

    {"id": ..., "kind": "stdio" | "call" | "assert", "program": str, "prelude": str,
     "fn_name": str, "check": str, "tests": [{"input": str} | {"args": [...]} | {}],
     "time_limit": s, "wall_limit": s, "memory_mb": int, "output_limit": bytes,
     "stop_on_failure": bool}

A response: ``{"id": ..., "results": [...], "clean": bool, "cleanup": str}`` with one result per test
run: ``{"status": "ok" | "wrong_answer" (a failed assert-style check) | "runtime_error" | "compile_error" |
"timeout" | "memory_limit" | "output_limit", "stdout": str, "value": json, "error": str, "stderr": str,
"cpu_s": float, "wall_s": float}``. The runner never sees expected outputs: the host judges.

Three kinds of process. The *supervisor* (this process: the host channel, limits, results) forks, before
it reads any request, a *zygote*: a warm interpreter (common modules preloaded) that never holds a
candidate's data and does nothing but fork. The program is compiled once per request in the supervisor (a
syntax error answers every test without a fork) and handed, marshalled in a memfd, to each test's *child*,
forked from the zygote: own session, the sandbox uid with no capabilities (``--uid``: the supervisor and
the zygote run as root and the candidate cannot signal, ptrace or ``prlimit`` them), rlimits, stdin fed from
the test, stdout/stderr drained continuously with a cap. The zygote is a child subreaper, so every
descendant of a test ends up its child: it reaps them all and sums their CPU time; inside a container the
supervisor also polls the cgroup's CPU counter, so CPU spent by any process counts while the test runs.
After each test every process of the candidate is killed (none survives into the next test); after each
request the work directory, ``/dev/shm`` and ``/dev/mqueue`` are emptied and the supervisor checks that
its own and the zygote's limits, affinity and priority are as they were; otherwise it answers
``clean: false`` and exits (the host replaces the sandbox).
"""

import builtins
import ctypes
import errno
import fcntl
import gc
import json
import marshal
import os
import resource
import select
import selectors
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback

# Modules that solutions commonly import: loaded once here, inherited by every forked child.
import bisect, collections, copy, decimal, fractions, functools, heapq, io, itertools  # noqa: E401,F401
import math, operator, random, re, statistics, string, typing  # noqa: E401,F401

STDERR_KEEP = 4096
# Signals the runner blocks (a program may not stop it with them); each child unblocks them.
BLOCKED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
                   signal.SIGALRM, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGXCPU, signal.SIGXFSZ)
MEM_EXIT = 86  # a child's exit code after MemoryError (also reported on the status pipe)


PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 4, 36, 38
# What a candidate could change in the supervisor or zygote to hurt the next one: checked after each request.
WATCHED_LIMITS = tuple(getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_"))
SCRATCH_DIRS = ("/dev/shm", "/dev/mqueue")  # shared memory and message queues: emptied after each request
HOST_SCRATCH_DIRS = ("/tmp", "/var/tmp", *SCRATCH_DIRS)  # backend process: the sandbox uid's entries removed
SYSV_IPC = ("/proc/sysvipc/shm", "/proc/sysvipc/msg", "/proc/sysvipc/sem")


def _prctl(option, value):
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _counter_file(paths):
    for path in paths:
        try:
            return os.open(path, os.O_RDONLY)
        except OSError:
            continue
    return None


@functools.cache
def _oom_file():
    """The cgroup's OOM event file, opened once (cgroup files are re-read with pread); else None."""
    return _counter_file(("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"))


@functools.cache
def _cpu_file():
    """The container cgroup's CPU counter (v2 ``cpu.stat``, v1 ``cpuacct.usage``); else None."""
    return _counter_file(("/sys/fs/cgroup/cpu.stat", "/sys/fs/cgroup/cpuacct/cpuacct.usage",
                          "/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage"))  # fmt: skip


def _oom_kills():
    try:
        for line in os.pread(_oom_file(), 4096, 0).splitlines():
            if line.startswith(b"oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError, TypeError):
        pass
    return 0


def _cgroup_cpu():
    """CPU seconds used by every process of this cgroup so far, or None (no cgroup of our own)."""
    try:
        data = os.pread(_cpu_file(), 4096, 0)
    except (OSError, TypeError):
        return None
    if data.startswith(b"usage_usec "):
        return int(data.split()[1]) / 1e6
    return int(data) / 1e9 if data.strip().isdigit() else None


def _self_cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@functools.cache
def _selector():
    """One epoll instance for the runner's life."""
    return selectors.DefaultSelector()


def _descendants(root):
    """Pids of every live descendant of ``root``."""
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
                parent[int(name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier and pid not in found}
        found |= frontier
    return found


def _fingerprint(pid):
    """The state of ``pid`` its forked children inherit: rlimits, CPU affinity, priority."""
    try:
        return ([resource.prlimit(pid, r) for r in WATCHED_LIMITS], os.sched_getaffinity(pid),
                os.getpriority(os.PRIO_PROCESS, pid))  # fmt: skip
    except OSError as e:
        return repr(e)


class _As:
    """Run file operations as the sandbox uid (its files, nothing else); no-op without uid separation."""

    def __init__(self, ids):
        self.uid = ids[0] if ids else None

    def __enter__(self):
        if self.uid is not None:
            os.seteuid(self.uid)

    def __exit__(self, *exc):
        if self.uid is not None:
            os.seteuid(0)


def _empty_dir(root, budget=100_000):
    """Remove everything inside ``root``, iteratively and by directory fd (no recursion, no path
    length limit, links never followed; a subtree deeper than 32 levels is first moved up into
    ``root``). True when ``root`` ended empty within ``budget`` entries."""
    try:
        rfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return True
    stack, n = [rfd], 0
    try:
        while stack and n < budget:
            fd, sub = stack[-1], None
            with os.scandir(fd) as entries:
                for entry in entries:
                    n += 1
                    try:
                        if not entry.is_dir(follow_symlinks=False):
                            os.unlink(entry.name, dir_fd=fd)
                            continue
                        try:
                            os.rmdir(entry.name, dir_fd=fd)
                            continue
                        except OSError:
                            pass
                        os.chmod(entry.name, 0o700, dir_fd=fd)
                        if len(stack) >= 32:
                            os.rename(entry.name, f".bonforge-wipe-{n}", src_dir_fd=fd, dst_dir_fd=rfd)
                            continue
                        sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                        break
                    except OSError:
                        continue
            if sub is not None:
                stack.append(sub)
            elif fd == rfd:
                break
            else:
                os.close(stack.pop())  # emptied: the parent's next pass removes it
        return not os.listdir(rfd)
    finally:
        for fd in stack:
            os.close(fd)


def _remove_owned(path, uid):
    """Backend process: remove the sandbox uid's entries of a shared directory (``/tmp``, ``/dev/shm``)."""
    try:
        entries = [e for e in os.scandir(path) if e.stat(follow_symlinks=False).st_uid == uid]
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                os.chmod(entry.path, 0o700)
                _empty_dir(entry.path)
                os.rmdir(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            pass


def _format_error(exc, sources):
    """A traceback of the program's frames, its lines taken from ``sources`` (cheaper than the
    ``traceback`` module's, which re-reads and re-parses every line)."""
    lines = {name: text.splitlines() for name, text in sources.items()}
    frames = [(f.f_code.co_filename, n, f.f_code.co_name) for f, n in traceback.walk_tb(exc.__traceback__)]
    frames = [fr for fr in frames if fr[0] != __file__]
    if len(frames) > 20:
        frames = frames[:5] + [("...", 0, f"{len(frames) - 15} frames")] + frames[-10:]
    out = ["Traceback (most recent call last):"]
    for name, n, func in frames:
        out.append(f'  File "{name}", line {n}, in {func}')
        src = lines.get(name)
        if src and 0 < n <= len(src):
            out.append("    " + src[n - 1].strip()[:200])
    out.append(f"{type(exc).__name__}: {str(exc)[:500]}")
    return "\n".join(out) + "\n"


def _enter_sandbox(fds, ids, nproc):
    """In a child forked from the zygote: standard streams, the request's payload, limits, the sandbox uid
    with no capabilities. Returns the payload; a failure is reported on fd 3 before any candidate code
    ran (the first line there is the set-up's: ``R`` when it succeeded)."""
    stdin_r, out_w, err_w, st_w, payload_fd = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in fds]
    os.dup2(st_w, 3)
    try:
        os.setsid()
        os.dup2(stdin_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        payload = marshal.loads(os.pread(payload_fd, os.fstat(payload_fd).st_size, 0))
        os.closerange(4, 65536)
        os.chdir(payload["workdir"])
        cpu = max(1, int(payload["time_limit"] + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        mem = int(payload["memory_mb"]) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(payload["file_limit"] or 16 << 20),) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc:  # backend process with its own uid per worker (in Docker the pids cgroup counts)
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        try:
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            os.write(fd, b"1000")
            os.close(fd)
        except OSError:
            pass
        if ids:  # drop to the sandbox uid: every capability is lost with it
            os.setgroups([])
            os.setresgid(ids[1], ids[1], ids[1])
            os.setresuid(ids[0], ids[0], ids[0])
            _prctl(PR_SET_DUMPABLE, 1)  # its own /proc entries become its own
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())  # the runner blocks these; the program gets them
        sys.argv = ["solution.py"]
        os.write(3, b"R\n")
        return payload
    except BaseException as e:  # the sandbox could not set up: not the program's fault
        os.write(3, (json.dumps({"s": "setup", "e": repr(e)}) + "\n").encode())
        os._exit(1)


def _child(fds, index, ids, nproc):
    """In a child forked from the zygote: enter the sandbox, run the program on test ``index``, report on
    fd 3. Never returns."""
    status_w = 3
    req = _enter_sandbox(fds, ids, nproc)
    compiled = (req["source"], req["code"], req["check_code"])
    test = dict(req["tests"][index])
    if req["kind"] == "call":
        test["fn_name"] = req["fn_name"]

    def report(obj):
        try:
            sys.stdout.flush()
        except BaseException:
            pass
        os.write(status_w, (json.dumps(obj) + "\n").encode())

    kind = req["kind"]
    source, code, check = compiled
    req_check = req.get("check") or ""
    ns = {"__name__": "__main__" if kind == "stdio" else "solution", "__builtins__": builtins}
    exit_code = 0
    try:
        try:
            exec(code, ns)
            if kind == "call":
                fn_name = test.pop("fn_name")
                target = ns["Solution"]() if "Solution" in ns and hasattr(ns["Solution"], fn_name) else ns
                fn = getattr(target, fn_name) if target is not ns else ns[fn_name]
                value = fn(*test.pop("args"))
                if isinstance(value, tuple):
                    value = list(value)
                try:
                    report({"s": "ok", "v": value})
                except (TypeError, ValueError):
                    report({"s": "ok", "unserializable": repr(value)[:200]})
                os._exit(0)
            if kind == "assert":
                try:
                    exec(check, ns)
                except AssertionError as e:
                    tb = e.__traceback__
                    while tb.tb_next is not None:
                        tb = tb.tb_next
                    if tb.tb_frame.f_code.co_filename != "check.py":
                        raise  # the program's own assert failed: a runtime error, not a failed check
                    sys.stderr.write(_format_error(e, {"solution.py": source, "check.py": req_check}))
                    report({"s": "wrong", "e": f"check failed: {str(e)[:200]}"})
                    os._exit(1)
        except SystemExit as e:
            exit_code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if kind != "stdio" and exit_code == 0:
                raise RuntimeError("the program exited before the tests ran") from None
        report({"s": "ok" if exit_code == 0 else "exc", "e": f"exit code {exit_code}"})
    except MemoryError:
        report({"s": "mem"})
        os._exit(MEM_EXIT)
    except BaseException as e:
        try:
            sys.stderr.write(_format_error(e, {"solution.py": source, "check.py": req_check}))
            sys.stderr.flush()
            report({"s": "exc", "e": f"{type(e).__name__}: {str(e)[:200]}"})
        except BaseException:
            pass
        os._exit(1)
    os._exit(exit_code & 0xFF)


def compile_program(req):
    """(source, program code, check code or None), compiled once per request in the runner: children
    inherit them. Compilation is bounded (CPython folds no large constants); a failure is the candidate's."""
    source = req.get("prelude", "") + req["program"]
    try:
        code = compile(source, "solution.py", "exec")
    except SyntaxError as e:
        if req["kind"] != "stdio" or e.msg != "'return' outside function":
            raise
        # As the APPS harness does: a script that returns at top level runs as a function body.
        body = "".join("    " + ln for ln in req["program"].splitlines(True))
        code = compile(f"{req.get('prelude', '')}def _main():\n{body}\n_main()\n", "solution.py", "exec")
    return source, code, compile(req["check"], "check.py", "exec") if req["kind"] == "assert" else None


class _Stuck(Exception):
    """A test's processes could not all be killed and reaped: this sandbox cannot run another test."""


def _zygote(sock, ids, nproc):
    """The zygote's loop: fork one child per test and reap every process that ends up ours (we are a
    subreaper), reporting the child's pid (``P``), its wait status (``S``) and, when no process of the
    test is left, the CPU seconds of all of them (``D``). Never returns."""
    keep = sock.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, 65536)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    gc.freeze()  # children's collectors then leave the preloaded objects alone: fewer copy-on-write faults
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 32, 8)
        except OSError:
            os._exit(1)
        if not msg:
            os._exit(0)
        try:
            pid = os.fork()
        except OSError:
            pid = -1
        if pid == 0:
            _child(fds, int(msg), ids, nproc)
        for fd in fds:
            os.close(fd)
        sock.send(b"P %d" % pid)
        if pid < 0:
            continue
        cpu = 0.0
        while True:
            try:
                done, wstatus, ru = os.wait4(-1, 0)
            except ChildProcessError:
                break
            cpu += ru.ru_utime + ru.ru_stime
            if done == pid:
                sock.send(b"S %d" % wstatus)
        sock.send(b"D %r" % cpu)


class _Sandbox:
    """The supervisor's side of the zygote, forked before any request is read, and of the clean-up."""

    def __init__(self, ids, nproc, contained):
        self.ids, self.contained = ids, contained
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            self.sock.close()
            _zygote(theirs, ids, nproc)
        theirs.close()
        self.state = (_fingerprint(os.getpid()), _fingerprint(self.pid))

    def start(self, index, fds):
        self.child = self.wstatus = self.cpu = None
        socket.send_fds(self.sock, [b"%d" % index], fds)

    def receive(self):
        msg = self.sock.recv(64)
        if not msg:
            raise RuntimeError("the zygote died")
        kind, value = msg.split()
        if kind == b"P":
            self.child = int(value)
            if self.child < 0:
                raise RuntimeError("the zygote could not fork")
        elif kind == b"S":
            self.wstatus = int(value)
        else:
            self.cpu = float(value)

    def survivors(self):
        """Processes of the candidate still alive: in a container everything but init, us and the zygote."""
        if self.contained:
            return {int(n) for n in os.listdir("/proc") if n.isdigit()} - {1, os.getpid(), self.pid}
        return _descendants(self.pid)

    def finish(self, timeout=5.0):
        """Kill every process of the test; wait until the zygote has reaped them all."""
        if self.child:
            try:
                os.killpg(self.child, signal.SIGKILL)
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        while self.cpu is None:
            if select.select([self.sock], [], [], 0.005)[0]:
                self.receive()
                continue
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
        with _As(self.ids):
            wiped = _empty_dir(workdir)
            if self.contained:
                wiped = all([_empty_dir(d) for d in SCRATCH_DIRS]) and wiped
            elif self.ids:
                for d in HOST_SCRATCH_DIRS:
                    _remove_owned(d, self.ids[0])
        if not wiped:
            problems.append("work directory, /dev/shm or /dev/mqueue not empty")
        if self.contained:
            for path in SYSV_IPC:
                try:
                    with open(path, "rb") as f:
                        if len(f.read().splitlines()) > 1:
                            problems.append(f"System V IPC objects left ({path})")
                except OSError:
                    pass
        if (_fingerprint(os.getpid()), _fingerprint(self.pid)) != self.state:
            problems.append("the runner's limits, affinity or priority changed")
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


def _status_report(st):
    """The child's report: the set-up's ``R`` line first (written before any candidate code ran: anything
    else there is a set-up failure, never forged), then the first JSON object the program's wrapper
    wrote, if any (a program can write anything to fd 3: garbage, however deep, is no report)."""
    first, _, rest = bytes(st).partition(b"\n")
    if first != b"R":
        raise RuntimeError(f"child set-up failed: {first[:500].decode(errors='replace')}")
    for line in rest.splitlines()[:4]:
        try:
            report = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(report, dict):
            return report
    return {}


def run_test(req, index, test, payload_fd, sandbox):
    data = test.get("input", "").encode()
    stdin_r, stdin_w = os.pipe() if data else (os.open(os.devnull, os.O_RDONLY), None)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    st_r, st_w = os.pipe()
    # A container's cgroup counts the CPU of every process, reaped or not: polled while the test runs.
    cgroup_before = _cgroup_cpu() if sandbox.contained else None
    oom_before, self_before = _oom_kills(), _self_cpu()
    start = time.monotonic()
    sandbox.start(index, [stdin_r, out_w, err_w, st_w, payload_fd])
    for fd in (stdin_r, out_w, err_w, st_w):
        os.close(fd)
    limit = int(req["output_limit"])
    cpu_limit = float(req["time_limit"])
    out, err, st = bytearray(), bytearray(), bytearray()
    sel = _selector()
    zfd = sandbox.sock.fileno()
    sel.register(zfd, selectors.EVENT_READ)
    for fd in (out_r, err_r, st_r):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    if data:
        os.set_blocking(stdin_w, False)
        sel.register(stdin_w, selectors.EVENT_WRITE)
    deadline = start + float(req["wall_limit"])
    poll = 0.1 if cgroup_before is not None else 1.0
    killed, sent = None, 0
    try:
        while sandbox.wstatus is None:
            now = time.monotonic()
            if now >= deadline:
                killed = "timeout"
                break
            if cgroup_before is not None and now - start > poll:
                if _cgroup_cpu() - cgroup_before - (_self_cpu() - self_before) > cpu_limit:
                    killed = "timeout"
                    break
            for key, _ in sel.select(min(deadline - now, poll)):
                fd = key.fd
                if fd == zfd:
                    sandbox.receive()
                elif fd == stdin_w:
                    try:
                        sent += os.write(fd, data[sent : sent + 65536])
                    except OSError:
                        sent = len(data)
                    if sent >= len(data):
                        sel.unregister(fd)
                        os.close(fd)
                        stdin_w = None
                else:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        sel.unregister(fd)
                    elif fd == out_r:
                        out += chunk
                    elif fd == err_r:
                        err += chunk
                        del err[:-STDERR_KEEP]
                    else:
                        st += chunk
            if len(out) > limit or len(st) > limit + 65536:
                killed = "output_limit"
                break
    finally:
        for fd in list(sel.get_map()):
            sel.unregister(fd)
    sandbox.finish()
    for fd in (out_r, err_r, st_r):  # what is already buffered
        for _ in range(64):
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            (out if fd == out_r else err if fd == err_r else st).extend(chunk)
            if fd == out_r and len(out) > limit:
                killed = killed or "output_limit"
                break
    for fd in (out_r, err_r, st_r, stdin_w):
        if fd is not None:
            os.close(fd)
    wall = time.monotonic() - start
    cpu, wstatus = sandbox.cpu, sandbox.wstatus  # every process of the test reaped: all their CPU counted
    report = _status_report(st[: limit + 65536])
    sig = os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus) else 0
    code = os.WEXITSTATUS(wstatus) if os.WIFEXITED(wstatus) else None
    result = {"cpu_s": round(cpu, 4), "wall_s": round(wall, 4)}
    if killed == "output_limit" or len(out) > limit:
        status = "output_limit"
    elif killed == "timeout" or cpu > float(req["time_limit"]) or sig == signal.SIGXCPU:
        status = "timeout"
    elif report.get("s") == "mem" or code == MEM_EXIT and not report or _oom_kills() > oom_before:
        status = "memory_limit"
    elif report.get("s") == "ok" and code == 0:
        status = "ok"
        if "v" in report:
            result["value"] = report["v"]
        elif "unserializable" in report:
            result["error"] = "return value is not JSON: " + report["unserializable"]
    elif report.get("s") == "wrong" and code == 1:
        status, result["error"] = "wrong_answer", report.get("e", "")  # an assert-style check failed
    elif not report and code == 0 and req["kind"] == "stdio":
        status = "ok"  # exited 0 without our wrapper reporting (os._exit(0)): the output is judged
    else:
        status = "runtime_error"
        result["error"] = str(report.get("e") or (f"killed by signal {sig}" if sig else f"exit code {code}"))[:1000]
    result["status"] = status
    result["stdout"] = bytes(out[:limit]).decode("utf-8", "replace") if status == "ok" else ""
    result["stderr"] = bytes(err[-STDERR_KEEP:]).decode("utf-8", "replace")
    return result


def handle(req, workdir, sandbox):
    tests = req.pop("tests")
    try:
        compiled = compile_program(req)
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError) as e:
        error = {"status": "compile_error", "error": f"{type(e).__name__}: {e}"[:1000], "stdout": "", "stderr": "",
                 "cpu_s": 0.0, "wall_s": 0.0}  # fmt: skip
        results = [dict(error) for _ in tests[: 1 if req.get("stop_on_failure") else None]]
        return {"id": req.get("id"), "results": results, "clean": True, "cleanup": ""}
    source, code, check = compiled
    payload = {k: req.get(k) for k in ("kind", "fn_name", "check", "time_limit", "memory_mb", "file_limit")}
    payload.update(source=source, code=code, check_code=check, tests=tests, workdir=workdir)
    pfd = os.memfd_create("bonforge-request", os.MFD_CLOEXEC)
    problems = []
    results = []
    try:
        view = memoryview(marshal.dumps(payload))
        while view:
            view = view[os.write(pfd, view) :]
        for i, test in enumerate(tests):
            results.append(run_test(req, i, test, pfd, sandbox))
            if req.get("stop_on_failure") and results[-1]["status"] != "ok":
                break
    except _Stuck as e:
        problems.append(str(e))
        note = {"status": "runtime_error", "error": f"not run: {e}", "stdout": "", "stderr": "", "cpu_s": 0.0,
                "wall_s": 0.0}  # fmt: skip
        results += [dict(note) for _ in tests[len(results) :]]
    finally:
        os.close(pfd)
    problems += sandbox.cleanup(workdir)
    return {"id": req.get("id"), "results": results, "clean": not problems, "cleanup": "; ".join(problems)}


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
    signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED_SIGNALS)
    _prctl(PR_SET_DUMPABLE, 0)  # programs may not read our memory through /proc
    _prctl(PR_SET_CHILD_SUBREAPER, 1)  # should the zygote die, its orphans are still ours to kill
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
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", write_through=False)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", write_through=True)

    sandbox = _Sandbox(ids, nproc, contained)  # before any request: the zygote never holds one

    def send(obj):
        proto_out.write(json.dumps(obj).encode() + b"\n")
        proto_out.flush()

    send({"event": "ready", "pid": os.getpid(), "python": sys.version.split()[0], "workdir": workdir})
    try:
        for line in proto_in:
            req = json.loads(line)
            del line
            try:
                response = handle(req, workdir, sandbox)
            except Exception as e:  # a runner fault: the host decides whose (a control program)
                response = {"id": req.get("id"), "error": f"{type(e).__name__}: {e}"}
            send(response)
            if not response.get("clean"):
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
