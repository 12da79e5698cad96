#!/usr/bin/env python3
"""bonforge sandbox runner: a long-lived process that runs untrusted programs against test inputs.

Standalone (Python 3 standard library only): the sandbox image carries a copy at
``/opt/bonforge/runner.py`` and the ``process`` backend starts this same file on the host.

Protocol: one JSON object per line, over stdin/stdout or, with ``--connect PATH``, over a Unix socket
the host listens on (the Docker backend: it skips the proxies of Docker's attach stream). The runner
first writes ``{"event": "ready", ...}``; then for each request line it writes one response line. A
request::

    {"id": ..., "kind": "stdio" | "call" | "assert", "program": str, "prelude": str, "fn_name": str,
     "tests": [{"input": str} | {"args": [json...]} | {"calls": [[[value...], {name: value}], ...],
               "go_on": bool}],
     "time_limit": s, "wall_limit": s, "memory_mb": int, "output_limit": bytes, "stop_on_failure": bool}

An ``assert`` test is a list of calls of ``fn_name`` (arguments in the tagged form of ``encode_value``),
planned on the host by the trusted checker (``checker.py``): the check's code and expected values never
enter the sandbox. The child makes the calls in order and stops at the first one that raises unless
``go_on``. A response: ``{"id": ..., "results": [...], "clean": bool, "cleanup": str}`` with one result
per test run: ``{"status": "ok" | "runtime_error" | "compile_error" | "timeout" | "memory_limit" |
"output_limit", "stdout": str, "stderr": str, "error": str, "cpu_s": float, "wall_s": float}`` plus, for
``call``, ``"value"`` (the tagged JSON text of the returned value) and, for ``assert``, ``"calls"``: one
line per call made, ``"v <tagged JSON>"`` or ``"x <JSON [exception class, message]>"``. Every field the
child supplies is capped here (stdout and the call lines together under ``output_limit``) and passed on
as text, never parsed: the host parses it with bounded size and depth. The runner never sees expected
outputs: the host judges.

The child reports on a result pipe (fd 3) with one line per event: ``v``/``x`` (a call's value or
exception), ``d`` (all calls made), ``e <text>`` (the program failed), ``m`` (MemoryError). Anything it
writes there is only a claim about its own behaviour, judged on the host. Set-up failures travel on a
separate pipe that the child closes before the program runs, so a program cannot forge one.

The program is compiled once per request (a syntax error answers every test without a fork); each test
runs in a child forked from this (preloaded) interpreter: own session and process group, rlimits,
stdin a memory file holding the test's input (``os.fstat(0).st_size`` is its length), stdout/stderr
drained continuously with a cap, the whole group killed at the wall-clock limit. A stdio program ends as
the interpreter would: non-daemon threads joined, ``atexit`` handlers run, streams flushed. After each
request every descendant is killed and the work directory wiped. With ``--contained`` (inside a
container, where the runner is alone with its init) it also sends SIGKILL to every process it may signal.
"""

import atexit
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


VALUE_DEPTH = 64  # nesting a value may have on the channel (deeper: not expressible)
_TAGS_SEQ = {"l": list, "t": tuple, "s": set, "fs": frozenset}
_HEX = re.compile(r"-?[0-9a-f]+\Z")
_FLOAT = re.compile(r"-?(inf|nan|[0-9]+(\.[0-9]*)?(e[+-]?[0-9]+)?)\Z")


class Opaque:
    """A value the channel cannot carry (an object of a type that is not builtin data): equal to nothing."""

    __slots__ = ("kind",)

    def __init__(self, kind):
        self.kind = str(kind)[:100]

    def __repr__(self):
        return f"<{self.kind} object>"


def encode_value(v, depth=0):
    """The plain, type-tagged JSON form of ``v``: None, bools and strings as JSON; ``["i", hex digits]``,
    ``["f", repr]`` (inf and nan included), ``["c", [re, im]]``, ``["b" | "ba", hex]`` (bytes, bytearray),
    ``["l" | "t" | "s" | "fs", [items]]``, ``["d", [[key, value], ...]]``, ``["?", type name]`` for anything
    else. Subclasses are read through their builtin base (their overrides never run), so an ``int``
    subclass travels as its integer and an object cannot bring its own ``__eq__``."""
    if depth > VALUE_DEPTH:
        raise ValueError(f"nested deeper than {VALUE_DEPTH}")
    t = type(v)
    if v is None or v is True or v is False:
        return v
    if issubclass(t, int):
        return ["i", int.__format__(v, "x")]
    if issubclass(t, float):
        return ["f", float.__repr__(v)]
    if issubclass(t, str):
        return str.__str__(v)
    if issubclass(t, complex):
        return ["c", [float.__repr__(complex.real.__get__(v)), float.__repr__(complex.imag.__get__(v))]]
    if issubclass(t, (bytes, bytearray)):
        return ["b" if issubclass(t, bytes) else "ba", (bytes if issubclass(t, bytes) else bytearray).hex(v)]
    for tag, base in _TAGS_SEQ.items():
        if issubclass(t, base):
            return [tag, [encode_value(x, depth + 1) for x in base.__iter__(v)]]
    if issubclass(t, dict):
        return ["d", [[encode_value(k, depth + 1), encode_value(x, depth + 1)] for k, x in dict.items(v)]]
    try:
        name = str.__str__(type.__dict__["__name__"].__get__(t))
    except Exception:
        name = "object"
    return ["?", name]


def decode_value(x, depth=0):
    """The inverse of ``encode_value`` for input from an untrusted side: builtin values only, nesting
    bounded, every tag and digit string checked; ``ValueError`` for anything else."""
    if depth > VALUE_DEPTH + 1:
        raise ValueError("value nested too deeply")
    if x is None or x is True or x is False or type(x) is str:
        return x
    if type(x) is not list or len(x) != 2 or type(x[0]) is not str:
        raise ValueError("not a tagged value")
    tag, body = x
    if tag == "i" and type(body) is str and _HEX.match(body):
        return int(body, 16)
    if tag == "f" and type(body) is str and len(body) < 40 and _FLOAT.match(body):
        return float(body)
    if tag == "c" and type(body) is list and len(body) == 2:
        return complex(decode_value(["f", body[0]], depth), decode_value(["f", body[1]], depth))
    if tag in ("b", "ba") and type(body) is str:
        return (bytes if tag == "b" else bytearray).fromhex(body)
    if tag in _TAGS_SEQ and type(body) is list:
        return _TAGS_SEQ[tag](decode_value(v, depth + 1) for v in body)
    if tag == "d" and type(body) is list:
        out = {}
        for pair in body:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError("not a dict item")
            out[decode_value(pair[0], depth + 1)] = decode_value(pair[1], depth + 1)
        return out
    if tag == "?" and type(body) is str:
        return Opaque(body)
    raise ValueError(f"bad tagged value {tag[:20]!r}")


def _builtin_name(exc):
    """The name of the nearest builtin class of an exception (a program's own classes are not carried)."""
    for cls in type.__dict__["__mro__"].__get__(type(exc)):
        if getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return "Exception"


def _exception_line(exc):
    try:
        msg = str(exc)[:500]
    except BaseException:
        msg = ""
    return json.dumps([_builtin_name(exc), msg])


def _finish_interpreter():
    """What the interpreter does at a normal exit: join non-daemon threads, run atexit handlers, flush."""
    if "threading" in sys.modules:
        try:
            sys.modules["threading"]._shutdown()
        except BaseException:
            pass
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def _child(req, compiled, test, fds, workdir):
    """In the forked child: set limits, run the program, report on fd 3. Never returns."""
    result_fd, setup_fd = 3, 4
    try:
        os.setsid()
        signal.pthread_sigmask(signal.SIG_SETMASK, ())  # the runner blocks these; the program gets them
        stdin_r, out_w, err_w, res_w, setup_w = fds
        os.dup2(stdin_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(res_w, result_fd)
        os.dup2(setup_w, setup_fd)
        os.closerange(setup_fd + 1, 65536)
        os.chdir(workdir)
        cpu = max(1, int(req["time_limit"] + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        mem = int(req["memory_mb"]) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        stack_hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
        stack = mem if stack_hard == resource.RLIM_INFINITY else min(mem, stack_hard)
        resource.setrlimit(resource.RLIMIT_STACK, (stack, stack_hard))
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
        os.close(setup_fd)  # from here on the program runs: it cannot report a set-up failure
    except BaseException as e:  # the sandbox could not set up: not the program's fault
        os.write(setup_fd, repr(e)[:500].encode())
        os._exit(1)

    def emit(line):
        os.write(result_fd, line.encode("utf-8", "replace") + b"\n")

    def failed(e):
        try:
            sys.stderr.write(_format_error(e, {"solution.py": source}))
            sys.stderr.flush()
        except BaseException:
            pass
        try:
            emit("e " + f"{type(e).__name__}: {str(e)[:300]}".replace("\n", " "))
        except BaseException:
            emit("e the program failed")
        os._exit(1)

    kind = req["kind"]
    source, code = compiled
    ns = {"__name__": "__main__" if kind == "stdio" else "solution", "__builtins__": builtins}
    try:
        try:
            exec(code, ns)
        except SystemExit as e:
            if kind != "stdio":
                raise RuntimeError("the program exited before the tests ran") from None
            status = e.code
            if status is not None and type(status) is not int:
                print(status, file=sys.stderr)  # as the interpreter does
            _finish_interpreter()
            os._exit(0 if status is None else int.__and__(status, 0xFF) if type(status) is int else 1)
        if kind == "stdio":
            _finish_interpreter()
            os._exit(0)
        fn_name = req["fn_name"]
        if kind == "call" and "Solution" in ns and hasattr(ns["Solution"], fn_name):
            fn = getattr(ns["Solution"](), fn_name)
        elif fn_name in ns:
            fn = ns[fn_name]
        else:
            raise NameError(f"name {fn_name!r} is not defined")
        if kind == "call":
            value = fn(*test["args"])
            try:
                emit("v " + json.dumps(encode_value(value)))
            except (ValueError, TypeError, RecursionError) as e:
                emit("v " + json.dumps(["?", f"unencodable value ({e})"[:200]]))
            os._exit(0)
        for args, kwargs in test["calls"]:
            try:
                value = fn(*[decode_value(a) for a in args], **{k: decode_value(a) for k, a in kwargs.items()})
            except MemoryError:
                raise
            except BaseException as e:
                emit("x " + _exception_line(e))
                try:
                    sys.stderr.write(_format_error(e, {"solution.py": source}))
                except BaseException:
                    pass
                if not test.get("go_on"):
                    break
                continue
            try:
                emit("v " + json.dumps(encode_value(value)))
            except (ValueError, TypeError, RecursionError) as e:
                emit("v " + json.dumps(["?", f"unencodable value ({e})"[:200]]))
        emit("d")
        os._exit(0)
    except MemoryError:
        emit("m")
        os._exit(MEM_EXIT)
    except BaseException as e:
        failed(e)


def compile_program(req):
    """(source, program code), compiled once per request in the runner: children inherit them.
    Compilation is bounded (CPython folds no large constants); a failure is the candidate's."""
    source = req.get("prelude", "") + req["program"]
    try:
        code = compile(source, "solution.py", "exec")
    except SyntaxError as e:
        if req["kind"] != "stdio" or e.msg != "'return' outside function":
            raise
        # As the APPS harness does: a script that returns at top level runs as a function body.
        body = "".join("    " + ln for ln in req["program"].splitlines(True))
        code = compile(f"{req.get('prelude', '')}def _main():\n{body}\n_main()\n", "solution.py", "exec")
    return source, code


def _stdin_file(data):
    """The test's input as a memory file (a regular file: its size is known, reads never block)."""
    fd = os.memfd_create("stdin", os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def run_test(req, compiled, test, workdir):
    stdin_r = _stdin_file(test.get("input", "").encode())
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    res_r, res_w = os.pipe()
    setup_r, setup_w = os.pipe()
    oom_before = _oom_kills()
    start = time.monotonic()
    gc.freeze()  # the child's collector then leaves our objects alone: fewer copy-on-write faults
    pid = os.fork()
    if pid == 0:
        for fd in (out_r, err_r, res_r, setup_r):
            os.close(fd)
        _child(req, compiled, test, (stdin_r, out_w, err_w, res_w, setup_w), workdir)
    for fd in (stdin_r, out_w, err_w, res_w, setup_w):
        os.close(fd)
    limit = int(req["output_limit"])
    out, err, res = bytearray(), bytearray(), bytearray()
    sel = _selector()
    for fd in (out_r, err_r, res_r):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    try:
        pidfd = os.pidfd_open(pid)
        sel.register(pidfd, selectors.EVENT_READ)
    except (AttributeError, OSError):
        pidfd = None
    deadline = start + float(req["wall_limit"])
    killed, rusage, wstatus = None, None, None
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
            chunk = os.read(fd, 65536)
            if not chunk:
                sel.unregister(fd)
            elif fd == err_r:
                err += chunk
                del err[:-STDERR_KEEP]
            else:
                (out if fd == out_r else res).extend(chunk)
        if len(out) + len(res) > limit:
            killed = "output_limit"
            break
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    if wstatus is None:
        _, wstatus, rusage = os.wait4(pid, 0)
    for fd in (out_r, err_r, res_r):  # what is already buffered
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
                killed = killed or "output_limit"
                break
    setup = os.read(setup_r, 1000)
    for fd in list(sel.get_map()):
        sel.unregister(fd)
    for fd in (out_r, err_r, res_r, setup_r, pidfd):
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
    if setup:
        raise RuntimeError(f"child setup failed: {setup.decode(errors='replace')}")
    wall = time.monotonic() - start
    cpu = rusage.ru_utime + rusage.ru_stime
    lines = bytes(res).decode("utf-8", "replace").splitlines() if len(out) + len(res) <= limit else []
    events = {ln[:1] for ln in lines}
    sig = os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus) else 0
    code = os.WEXITSTATUS(wstatus) if os.WIFEXITED(wstatus) else None
    result = {"cpu_s": round(cpu, 4), "wall_s": round(wall, 4)}
    kind = req["kind"]
    if kind == "call":
        values = [ln[2:] for ln in lines if ln.startswith("v ")]
        if values:
            result["value"] = values[0]
    elif kind == "assert":
        result["calls"] = [ln for ln in lines if ln.startswith(("v ", "x "))]
    if killed == "output_limit" or len(out) + len(res) > limit:
        status = "output_limit"
    elif killed == "timeout" or cpu > float(req["time_limit"]) or sig == signal.SIGXCPU:
        status = "timeout"
    elif "m" in events or code == MEM_EXIT or _oom_kills() > oom_before:
        status = "memory_limit"
    elif code == 0 and "e" not in events and (kind == "stdio" or "value" in result or "d" in events):
        status = "ok"
    else:
        status = "runtime_error"
        errors = [ln[2:502] for ln in lines if ln.startswith("e ")]
        result["error"] = errors[0] if errors else (f"killed by signal {sig}" if sig else f"exit code {code}")
        if not errors and code == 0:
            result["error"] = "the program ended without answering"
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
    sys.set_int_max_str_digits(0)  # inherited: programs may print and read integers of any length
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
                response = {"id": req.get("id"), "error": f"{type(e).__name__}: {e}"[:2000]}
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
