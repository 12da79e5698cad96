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

The program is compiled once per request (a syntax error answers every test without a fork); each test
runs in a child forked from this (preloaded) interpreter: own session and process group, rlimits,
stdin fed from the test, stdout/stderr drained continuously with a cap, the whole group killed
at the wall-clock limit. After each request every descendant is killed and the work directory wiped.
With ``--contained`` (inside a container, where the runner is alone with its init) it also sends
SIGKILL to every process it may signal.
"""

import builtins
import ctypes
import errno
import gc
import json
import os
import resource
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


def _prctl(option, value):
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@functools.cache
def _oom_file():
    """The cgroup's OOM event file, opened once (cgroup files are re-read with pread); else /dev/null."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            return os.open(path, os.O_RDONLY)
        except OSError:
            continue
    return os.open(os.devnull, os.O_RDONLY)


def _oom_kills():
    try:
        for line in os.pread(_oom_file(), 4096, 0).splitlines():
            if line.startswith(b"oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


@functools.cache
def _selector():
    """One epoll instance for the runner's life."""
    return selectors.DefaultSelector()


def _descendants(root):
    """Pids of every live descendant of ``root`` (orphans are reparented to us: we are a subreaper)."""
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


def _reap():
    """Reap exited children; True when no child is left at all."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return False


def _kill_all(contained, subreaper):
    """Kill every descendant (and, contained, everything we may signal); True when none is left.

    As a subreaper, every surviving descendant is a child of ours (orphans are reparented to us), so
    having no child at all proves the tree empty without scanning /proc."""
    me = os.getpid()
    for _ in range(200):
        if contained:
            try:
                os.kill(-1, signal.SIGKILL)  # spares ourselves and pid 1
            except OSError:
                pass
        if subreaper and _reap():
            return True
        left = _descendants(me)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if _reap() and not left:
            return True
        time.sleep(0.005)
    return False


def _wipe(workdir):
    for name in os.listdir(workdir):
        path = os.path.join(workdir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            for d, _, _ in os.walk(path):
                try:
                    os.chmod(d, 0o700)
                except OSError:
                    pass
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
    return not os.listdir(workdir)


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


def _child(req, compiled, test, fds, workdir):
    """In the forked child: set limits, run the program, report on fd 3. Never returns."""
    status_w = 3
    try:
        os.setsid()
        signal.pthread_sigmask(signal.SIG_SETMASK, ())  # the runner blocks these; the program gets them
        stdin_r, out_w, err_w, st_w = fds
        os.dup2(stdin_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(st_w, status_w)
        os.closerange(status_w + 1, 65536)
        os.chdir(workdir)
        cpu = max(1, int(req["time_limit"] + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        mem = int(req["memory_mb"]) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(req.get("file_limit", 16 << 20)),) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if req.get("nproc"):
            resource.setrlimit(resource.RLIMIT_NPROC, (int(req["nproc"]),) * 2)
        try:
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            os.write(fd, b"1000")
            os.close(fd)
        except OSError:
            pass
        sys.argv = ["solution.py"]
    except BaseException as e:  # the sandbox could not set up: not the program's fault
        os.write(status_w, (json.dumps({"s": "setup", "e": repr(e)}) + "\n").encode())
        os._exit(1)

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


def run_test(req, compiled, test, workdir):
    data = test.get("input", "").encode()
    stdin_r, stdin_w = os.pipe() if data else (os.open(os.devnull, os.O_RDONLY), None)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    st_r, st_w = os.pipe()
    child_test = dict(test)
    if req["kind"] == "call":
        child_test["fn_name"] = req["fn_name"]
    oom_before = _oom_kills()
    start = time.monotonic()
    gc.freeze()  # the child's collector then leaves our objects alone: fewer copy-on-write faults
    pid = os.fork()
    if pid == 0:
        for fd in (out_r, err_r, st_r):
            os.close(fd)
        _child(req, compiled, child_test, (stdin_r, out_w, err_w, st_w), workdir)
    for fd in (stdin_r, out_w, err_w, st_w):
        os.close(fd)
    limit = int(req["output_limit"])
    out, err, st = bytearray(), bytearray(), bytearray()
    sel = _selector()
    for fd in (out_r, err_r, st_r):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    if data:
        os.set_blocking(stdin_w, False)
        sel.register(stdin_w, selectors.EVENT_WRITE)
    try:
        pidfd = os.pidfd_open(pid)
        sel.register(pidfd, selectors.EVENT_READ)
    except (AttributeError, OSError):
        pidfd = None
    deadline = start + float(req["wall_limit"])
    killed, rusage, wstatus, sent = None, None, None, 0
    while True:
        now = time.monotonic()
        if wstatus is None:
            done, ws, ru = os.wait4(pid, os.WNOHANG)
            if done:
                wstatus, rusage = ws, ru
        if wstatus is not None:
            break
        if now >= deadline:
            killed = "timeout"
            break
        for key, _ in sel.select(min(deadline - now, 0.05 if pidfd is None else 1.0)):
            fd = key.fd
            if fd == pidfd:
                continue
            if fd == stdin_w:
                try:
                    sent += os.write(fd, data[sent : sent + 65536])
                except OSError:
                    sent = len(data)
                if sent >= len(data):
                    sel.unregister(fd)
                    os.close(fd)
                    stdin_w = None
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                sel.unregister(fd)
                continue
            if fd == out_r:
                out += chunk
            elif fd == err_r:
                err += chunk
                del err[:-STDERR_KEEP]
            else:
                st += chunk
        if len(out) > limit:
            killed = "output_limit"
            break
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    if wstatus is None:
        _, wstatus, rusage = os.wait4(pid, 0)
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
    for fd in list(sel.get_map()):
        sel.unregister(fd)
    for fd in (out_r, err_r, st_r, stdin_w, pidfd):
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
    wall = time.monotonic() - start
    cpu = rusage.ru_utime + rusage.ru_stime
    report = {}
    for line in bytes(st).splitlines():
        try:
            report = json.loads(line)
            break
        except ValueError:
            continue
    sig = os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus) else 0
    code = os.WEXITSTATUS(wstatus) if os.WIFEXITED(wstatus) else None
    result = {"cpu_s": round(cpu, 4), "wall_s": round(wall, 4)}
    if killed == "output_limit" or len(out) > limit:
        status = "output_limit"
    elif report.get("s") == "setup":
        raise RuntimeError(f"child setup failed: {report.get('e')}")
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
        result["error"] = report.get("e") or (f"killed by signal {sig}" if sig else f"exit code {code}")
    result["status"] = status
    result["stdout"] = bytes(out[:limit]).decode("utf-8", "replace") if status == "ok" else ""
    result["stderr"] = bytes(err[-STDERR_KEEP:]).decode("utf-8", "replace")
    return result


def handle(req, workdir, contained, subreaper):
    tests = req.pop("tests")
    try:
        compiled = compile_program(req)
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError) as e:
        error = {"status": "compile_error", "error": f"{type(e).__name__}: {e}"[:1000], "stdout": "", "stderr": "",
                 "cpu_s": 0.0, "wall_s": 0.0}  # fmt: skip
        results = [dict(error) for _ in tests[: 1 if req.get("stop_on_failure") else None]]
        return {"id": req.get("id"), "results": results, "clean": True, "cleanup": ""}
    results = []
    for test in tests:
        results.append(run_test(req, compiled, test, workdir))
        if req.get("stop_on_failure") and results[-1]["status"] != "ok":
            break
    clean = _kill_all(contained, subreaper)
    wiped = _wipe(workdir)
    problems = ([] if clean else ["processes survived"]) + ([] if wiped else ["work directory not empty"])
    return {"id": req.get("id"), "results": results, "clean": clean and wiped, "cleanup": "; ".join(problems)}


def main():
    contained = "--contained" in sys.argv
    signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED_SIGNALS)
    _prctl(4, 0)  # PR_SET_DUMPABLE 0: programs may not read our memory through /proc
    subreaper = _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphaned descendants stay ours to kill
    workdir = "/tmp" if contained else tempfile.mkdtemp(prefix="bonforge-run-")
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

    def send(obj):
        proto_out.write(json.dumps(obj).encode() + b"\n")
        proto_out.flush()

    send({"event": "ready", "pid": os.getpid(), "python": sys.version.split()[0], "workdir": workdir})
    try:
        for line in proto_in:
            req = json.loads(line)
            del line
            try:
                response = handle(req, workdir, contained, subreaper)
            except Exception as e:  # a runner fault: the host treats it as a sandbox error
                response = {"id": req.get("id"), "error": f"{type(e).__name__}: {e}"}
            send(response)
            if not response.get("clean"):
                break  # after a fault or a failed cleanup, this sandbox is not reused
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        _kill_all(contained, subreaper)
        if not contained:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except OSError as e:
        if e.errno != errno.EPIPE:
            raise
