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
     "time_limit": s, "wall_limit": s, "memory_mb": int, "output_limit": bytes, "stop_on_failure": bool,
     "budget": s}

``budget`` (optional): the wall-clock seconds all the request's tests may take together; each test's wall
limit is cut to what is left, and once nothing is left the remaining tests are not run (``timeout``).

An ``assert`` test is a list of calls of ``fn_name`` (arguments in the tagged form of ``encode_value``),
planned by the checker (``checker.py``, in a container of its own: the check is the dataset's code, not
trusted): the check's code and expected values never enter the candidate's sandbox. The child makes the
calls in order and stops at the first one that raises unless ``go_on``. A response:
``{"id": ..., "results": [...], "clean": bool, "cleanup": str}`` with one result per test run:
``{"status": "ok" | "runtime_error" | "compile_error" | "timeout" | "memory_limit" | "output_limit",
"stdout": str, "stderr": str, "error": str, "cpu_s": float, "wall_s": float}`` plus, for
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

import atexit
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
import signal
import socket
import stat
import sys
import time
import weakref

# Modules that solutions commonly import: loaded once here, inherited by every forked child.
import bisect, collections, copy, decimal, fractions, functools, heapq, io, itertools  # noqa: E401,F401
import math, operator, random, re, statistics, string, typing  # noqa: E401,F401

STDERR_KEEP = 4096
# Signals the runner blocks (a program may not stop it with them); each child unblocks them.
BLOCKED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
                   signal.SIGALRM, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGXCPU, signal.SIGXFSZ)
MEM_EXIT = 86  # a child's exit code after MemoryError (also reported on the result pipe)
RESULT_FD, SETUP_FD = 3, 4  # a child's result pipe, and its set-up pipe (closed before the program runs)


PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 4, 36, 38
# The kernel's OOM killer picks the process with the highest RSS + oom_score_adj share. Memory a program
# holds outside its RSS (socket buffers, charged to the container's cgroup) must never make it pick the
# supervisor or zygote: they are unkillable (-1000), tests' processes the first choice (1000). Written by a
# process with CAP_SYS_RESOURCE the value is also the floor its descendants may lower it to.
OOM_RUNNER, OOM_CANDIDATE = -1000, 1000
PIPE_HOLD_MAX = 1 << 20  # the most a result pipe is enlarged to (the kernel's default pipe-max-size)
STACK_BYTES = 8 << 20  # a test's stack soft limit when the hard limit is finite
# What a candidate could change in the supervisor or zygote to hurt the next one: checked after each request.
WATCHED_LIMITS = tuple(getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_"))
SCRATCH_DIRS = ("/dev/shm", "/dev/mqueue")  # shared memory and message queues: emptied after each request
HOST_SCRATCH_DIRS = ("/tmp", "/var/tmp", *SCRATCH_DIRS)  # backend process: the sandbox uid's entries removed
SYSV_IPC = ("/proc/sysvipc/shm", "/proc/sysvipc/msg", "/proc/sysvipc/sem")


@functools.cache
def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _prctl(option, value):
    try:
        return _libc().prctl(option, value, 0, 0, 0) == 0
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


def _set_oom_score_adj(value):
    """Whether ``/proc/self/oom_score_adj`` now holds ``value`` (below the floor it needs CAP_SYS_RESOURCE)."""
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        try:
            os.write(fd, b"%d" % value)
        finally:
            os.close(fd)
        return True
    except OSError:
        return False


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


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError:
        return []


def _mtime(path):
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _private_scratch(size_mb):
    """Backend process as root, in mount and IPC namespaces of its own: fresh file systems over the host's
    shared scratch folders, so a program never reaches the host's (Ray's world-writable session folders
    under /tmp included)."""
    for path in HOST_SCRATCH_DIRS:
        if os.path.isdir(path):
            kind = b"mqueue" if path == "/dev/mqueue" else b"tmpfs"
            opts = None if kind == b"mqueue" else f"size={size_mb}m,mode=1777".encode()
            if _libc().mount(kind, path.encode(), kind, 2 | 4, opts) != 0:  # MS_NOSUID | MS_NODEV
                raise OSError(ctypes.get_errno(), f"cannot mount a private {path}")


def _remove_owned(path, uid, keep):
    """Backend process: remove the sandbox uid's entries of a shared directory (``/tmp``, ``/dev/shm``),
    but not ``keep`` (the work directory)."""
    try:
        entries = [e for e in os.scandir(path) if e.stat(follow_symlinks=False).st_uid == uid and e.path != keep]
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
    frames, tb = [], exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno, tb.tb_frame.f_code.co_name))
        tb = tb.tb_next
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
ITER_ITEMS = 1_000_000  # items a returned generator or iterator may yield
_RAW_INT = 1 << 63  # integers below this in magnitude travel as plain JSON numbers
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
    """The plain, type-tagged JSON form of ``v``: None, bools, strings, floats and integers under 2**63 as
    JSON; ``["i", hex digits]`` (other integers, and int subclasses), ``["f", repr]`` (float subclasses),
    ``["c", [re, im]]``, ``["b" | "ba", hex]`` (bytes, bytearray),
    ``["l" | "t" | "s" | "fs", [items]]``, ``["d", [[key, value], ...]]``, ``["r", [start, stop, step]]``
    (a range), ``["it", [items]]`` (a generator or iterator, run to its end here: it arrives as an iterator
    over those items), ``["?", type name]`` for anything else. Subclasses are read through their builtin
    base (their overrides never run), so an ``int`` subclass travels as its integer and an object cannot
    bring its own ``__eq__``."""
    if depth > VALUE_DEPTH:
        raise ValueError(f"nested deeper than {VALUE_DEPTH}")
    t = type(v)
    if v is None or v is True or v is False or t is str or t is float or t is int and -_RAW_INT < v < _RAW_INT:
        return v  # plain JSON: exact (JSON tells 1 from 1.0; floats as repr, inf and nan included)
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
    if t is range:
        return ["r", [encode_value(v.start), encode_value(v.stop), encode_value(v.step)]]
    if hasattr(t, "__next__") and hasattr(t, "__iter__"):  # a generator or iterator: what it yields
        items = []
        for x in v:
            if len(items) >= ITER_ITEMS:
                raise ValueError(f"an iterator of more than {ITER_ITEMS} items")
            items.append(encode_value(x, depth + 1))
        return ["it", items]
    try:
        name = str.__str__(type.__dict__["__name__"].__get__(t))
    except Exception:
        name = "object"
    return ["?", name]


HASH_COLLISIONS = 1000  # keys of one set or dict that may share a hash with another key


def _few_collisions(keys):
    """``keys``, unless more than ``HASH_COLLISIONS`` of them share hashes (integers a multiple of 2**61 - 1
    apart hash alike: a set of thousands of them takes quadratic time to build); ``ValueError`` then."""
    if len(keys) - len({hash(k) for k in keys}) > HASH_COLLISIONS:
        raise ValueError("set or dict keys crafted to share hashes")
    return keys


def decode_value(x, depth=0):
    """The inverse of ``encode_value`` for input from an untrusted side: builtin values only, nesting
    bounded, every tag and digit string checked; ``ValueError`` for anything else."""
    if depth > VALUE_DEPTH + 1:
        raise ValueError("value nested too deeply")
    if x is None or x is True or x is False or type(x) in (str, int, float):
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
        items = [decode_value(v, depth + 1) for v in body]
        return _TAGS_SEQ[tag](_few_collisions(items) if tag in ("s", "fs") else items)
    if tag == "d" and type(body) is list:
        if not all(type(pair) is list and len(pair) == 2 for pair in body):
            raise ValueError("not a dict item")
        keys = _few_collisions([decode_value(pair[0], depth + 1) for pair in body])
        return dict(zip(keys, [decode_value(pair[1], depth + 1) for pair in body], strict=True))
    if tag == "r" and type(body) is list and len(body) == 3:
        return range(*(decode_value(x, depth + 1) for x in body))
    if tag == "it" and type(body) is list:
        return iter([decode_value(v, depth + 1) for v in body])
    if tag == "?" and type(body) is str:
        return Opaque(body)
    raise ValueError(f"bad tagged value {tag[:20]!r}")


def _builtin_name(exc):
    """The name of the nearest builtin class of an exception (a program's own classes are not carried)."""
    for cls in type.__dict__["__mro__"].__get__(type(exc)):
        if getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return "Exception"


def _value_line(value):
    """The ``v`` line of a returned value (plain integers, the common case, without the JSON encoder)."""
    if type(value) is int and -_RAW_INT < value < _RAW_INT:
        return f"v {value}"
    try:
        return "v " + json.dumps(encode_value(value))
    except (ValueError, TypeError, RecursionError) as e:
        return "v " + json.dumps(["?", f"unencodable value ({e})"[:200]])


def _exception_line(exc):
    try:
        msg = str(exc)[:500]
    except BaseException:
        msg = ""
    return json.dumps([_builtin_name(exc), msg])


def _finish_interpreter(name):
    """What the interpreter does at a normal exit: join non-daemon threads, run atexit handlers, flush the
    standard streams, drop the program's module ``name`` from sys.modules and collect garbage (a namespace
    in a reference cycle, which any function makes, goes with its objects: files they hold are flushed and
    ``__del__`` runs with the program's globals still there, as in CPython), clear what survives of the
    namespace but ``__builtins__`` (files left open are flushed as their objects go), flush again. The
    caller holds no reference to the module."""
    if "threading" in sys.modules:
        try:
            sys.modules["threading"]._shutdown()
        except BaseException:
            pass
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    _flush_streams()
    try:
        module = weakref.ref(sys.modules.pop(name))
        _flush_writers()
        gc.collect()
        if module() is not None:  # still referenced from elsewhere: its namespace is cleared
            ns = module().__dict__
            kept = ns.get("__builtins__")
            ns.clear()
            ns["__builtins__"] = kept
            del ns
            gc.collect()
    except BaseException:
        pass
    _flush_streams()


def _exit_status(code):
    """The exit status of ``SystemExit(code)``, as CPython gives it: None is 0, an integer (bools, IntEnum
    members and other int subclasses included) its value modulo 256, anything else is printed to stderr
    and gives 1."""
    if code is None:
        return 0
    if issubclass(type(code), int):
        return int.__and__(code, 0xFF)
    try:
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def _flush_writers():
    """Flush every file object the program left open, text layers before the buffers under them: a garbage
    collection finalizes the objects of a reference cycle in no set order, a buffer may be closed before
    the text layer above it flushed into it (CPython's exit writes such a file out)."""
    text, buffered = [], []
    for obj in gc.get_objects():  # the program's objects: the zygote's are frozen, not listed
        if isinstance(obj, io.TextIOWrapper):
            text.append(obj)
        elif isinstance(obj, (io.BufferedWriter, io.BufferedRandom)):
            buffered.append(obj)
    for obj in text + buffered:
        try:
            obj.flush()
        except BaseException:
            pass


def _flush_streams():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def _enter_sandbox(fds, ids, nproc):
    """In a child forked from the zygote: standard streams, the request's payload, limits, the sandbox uid
    with no capabilities. Returns the payload. A failure is reported on fd 4, which is closed before the
    program runs (so a program cannot forge one)."""
    stdin_r, out_w, err_w, res_w, setup_w, payload_fd = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in fds]
    os.dup2(setup_w, SETUP_FD)
    try:
        os.setsid()
        os.dup2(stdin_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(res_w, RESULT_FD)
        payload = marshal.loads(os.pread(payload_fd, os.fstat(payload_fd).st_size, 0))
        os.closerange(SETUP_FD + 1, 65536)
        os.chdir(payload["workdir"])
        cpu = max(1, int(payload["time_limit"] + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        mem = int(payload["memory_mb"]) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        # No stack limit of its own where the hard limit allows: the main thread's stack may grow up to the
        # address-space limit (deep recursion), while a new process's threads get the C library's default
        # stack size (it takes the soft limit when finite: a soft limit of ``mem`` would make every thread of
        # a subprocess reserve ``mem`` of address space, which RLIMIT_AS refuses).
        stack_hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
        stack = stack_hard if stack_hard == resource.RLIM_INFINITY else min(STACK_BYTES, stack_hard)
        resource.setrlimit(resource.RLIMIT_STACK, (stack, stack_hard))
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(payload["file_limit"] or 16 << 20),) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc:  # backend process with its own uid per worker (in Docker the pids cgroup counts)
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        _set_oom_score_adj(OOM_CANDIDATE)  # with CAP_SYS_RESOURCE also its floor: the program cannot go below
        if ids:  # drop to the sandbox uid: every capability is lost with it
            os.setgroups([])
            os.setresgid(ids[1], ids[1], ids[1])
            os.setresuid(ids[0], ids[0], ids[0])
            # Left not dumpable (as the uid change makes it): its /proc entries stay root's, so the program
            # cannot write its oom_score_adj back down (a process it execs can, to the floor, see OOM_RUNNER).
        signal.pthread_sigmask(signal.SIG_SETMASK, ())  # the runner blocks these; the program gets them
        sys.argv = ["solution.py"]
        os.close(SETUP_FD)  # from here on the program runs: it cannot report a set-up failure
        return payload
    except BaseException as e:  # the sandbox could not set up: not the program's fault
        os.write(SETUP_FD, repr(e)[:500].encode())
        os._exit(1)


def _child(fds, index, ids, nproc):
    """In a child forked from the zygote: enter the sandbox, run the program on test ``index``, report on
    the result pipe (fd 3). Never returns."""
    req = _enter_sandbox(fds, ids, nproc)
    compiled = (req["source"], req["code"])
    test = req["tests"][index]
    result_fd = RESULT_FD

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
    # The program's namespace is a module in sys.modules, as a script's is: pickle (multiprocessing) finds
    # its functions and classes there by name; its __builtins__ is the builtins module, as a script's is
    # (exec would insert the module's dict, what an imported module sees).
    ns_name = "__main__" if kind == "stdio" else "solution"
    module = type(sys)(ns_name)
    sys.modules[ns_name] = module
    ns = module.__dict__
    ns["__builtins__"] = builtins
    try:
        status = 0
        try:
            exec(code, ns)
        except SystemExit as e:
            if kind != "stdio":
                raise RuntimeError("the program exited before the tests ran") from None
            status = _exit_status(e.code)
        if kind == "stdio":
            del module, ns  # the namespace is now held by sys.modules only (and the program's own objects)
            _finish_interpreter(ns_name)
            os._exit(status)
        fn_name = req["fn_name"]
        if kind == "call" and "Solution" in ns and hasattr(ns["Solution"], fn_name):
            fn = getattr(ns["Solution"](), fn_name)
        elif fn_name in ns:
            fn = ns[fn_name]
        else:
            raise NameError(f"name {fn_name!r} is not defined")
        if kind == "call":
            value = fn(*test["args"])
            emit(_value_line(value))
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
            emit(_value_line(value))
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


def _holds(fd, size):
    """Make the pipe ``fd`` hold ``size`` bytes if the kernel allows it: then its writer never waits for a
    reader below that size, and the supervisor need not wake up for every line a child writes (it reads
    the pipe whenever it wakes, at least every poll interval, and once the child is done)."""
    if size > PIPE_HOLD_MAX:  # (with CAP_SYS_RESOURCE the kernel's own cap would not apply)
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


def _zygote(sock, ids, nproc):
    """The zygote's loop: fork one child per test and reap every process that ends up ours (we are a
    subreaper). When the child has exited: ``D <wait status> <CPU seconds>`` if no process of the test is
    left (the CPU of all of them), else ``S <wait status>`` and, once the rest are reaped, ``D``; ``E`` when
    it cannot fork. Never returns."""
    keep = sock.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, 65536)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)  # set once here: every child inherits it, and it cannot be unset
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
        if pid < 0:
            sock.send(b"E")
            continue
        cpu, wstatus, flags = 0.0, -1, 0
        while True:
            try:
                done, status, ru = os.wait4(-1, flags)
            except ChildProcessError:
                break
            if done == 0:  # the child is gone, others are not: say so, then wait for them
                sock.send(b"S %d" % wstatus)
                flags = 0
                continue
            cpu += ru.ru_utime + ru.ru_stime
            if done == pid:
                wstatus, flags = status, os.WNOHANG
        sock.send(b"D %d %r" % (wstatus, cpu))


class _Sandbox:
    """The supervisor's side of the zygote, forked before any request is read, and of the clean-up."""

    def __init__(self, ids, nproc, contained, own_ipc):
        self.ids, self.contained, self.own_ipc = ids, contained, own_ipc
        self.scanned = {}  # backend process: shared scratch directory -> its mtime when last cleaned
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            self.sock.close()
            _zygote(theirs, ids, nproc)
        theirs.close()
        self.state = _fingerprint(self.pid)  # what every test's process inherits

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
        return _descendants(self.pid)

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
        used = [d for d in (workdir, *SCRATCH_DIRS) if (d == workdir or self.contained) and _listdir(d)]
        wiped = True
        with _As(self.ids):
            for d in used:
                wiped = _empty_dir(d) and wiped
            if self.ids and not self.contained:
                for d in HOST_SCRATCH_DIRS:  # scanned only when changed since the last look (a new entry)
                    if _mtime(d) != self.scanned.get(d):
                        _remove_owned(d, self.ids[0], workdir)
                        self.scanned[d] = _mtime(d)
        if not wiped:
            problems.append("work directory, /dev/shm or /dev/mqueue not empty")
        if self.own_ipc:  # System V objects of this sandbox's IPC namespace only
            for path in SYSV_IPC:
                try:
                    with open(path, "rb") as f:
                        if len(f.read().splitlines()) > 1:
                            problems.append(f"System V IPC objects left ({path})")
                except OSError:
                    pass
        if _fingerprint(self.pid) != self.state:
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


def run_test(req, index, test, payload_fd, sandbox):
    stdin_r = _stdin_file(test.get("input", "").encode())
    if req["kind"] == "stdio":
        out_r, out_w = os.pipe()
    else:  # the returned values are judged: prints are ignored (as the reference harnesses do), never capped
        out_r, out_w = None, os.open(os.devnull, os.O_WRONLY)
    err_r, err_w = os.pipe()
    for fd in (out_w, err_w):  # the test's uid may reopen them (/dev/stdout, /proc/self/fd/1), no one else can
        _writable_by_all(fd)
    res_r, res_w = os.pipe()
    quiet = _holds(res_w, int(req["output_limit"]))  # then read on other wake-ups only, not for each line
    setup_r, setup_w = os.pipe()
    # A container's cgroup counts the CPU of every process, reaped or not: polled while the test runs.
    cgroup_before = _cgroup_cpu() if sandbox.contained else None
    oom_before, self_before = _oom_kills(), _self_cpu()
    start = time.monotonic()
    sandbox.start(index, [stdin_r, out_w, err_w, res_w, setup_w, payload_fd])
    for fd in (stdin_r, out_w, err_w, res_w, setup_w):
        os.close(fd)
    limit = int(req["output_limit"])
    cpu_limit = float(req["time_limit"])
    out, err, res = bytearray(), bytearray(), bytearray()
    sel = _selector()
    zfd = sandbox.sock.fileno()
    sel.register(zfd, selectors.EVENT_READ)
    drained = [fd for fd in (out_r, err_r, res_r) if fd is not None]
    for fd in drained:
        os.set_blocking(fd, False)
        if not (quiet and fd == res_r):
            sel.register(fd, selectors.EVENT_READ)
    deadline = start + float(req["wall_limit"])
    poll = 0.1 if cgroup_before is not None else 1.0
    killed = None
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
                killed = "output_limit"
                break
    finally:
        for fd in list(sel.get_map()):
            sel.unregister(fd)
    sandbox.finish()
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
                killed = killed or "output_limit"
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


def handle(req, workdir, sandbox):
    tests = req.pop("tests")
    try:
        compiled = compile_program(req)
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError) as e:
        error = {"status": "compile_error", "error": f"{type(e).__name__}: {e}"[:1000], "stdout": "", "stderr": "",
                 "cpu_s": 0.0, "wall_s": 0.0}  # fmt: skip
        results = [dict(error) for _ in tests[: 1 if req.get("stop_on_failure") else None]]
        return {"id": req.get("id"), "results": results, "clean": True, "cleanup": ""}
    source, code = compiled
    payload = {k: req.get(k) for k in ("kind", "fn_name", "time_limit", "memory_mb", "file_limit")}
    payload.update(source=source, code=code, tests=tests, workdir=workdir)
    pfd = os.memfd_create("bonforge-request", os.MFD_CLOEXEC)
    problems = []
    results = []
    try:
        view = memoryview(marshal.dumps(payload))
        while view:
            view = view[os.write(pfd, view) :]
        begun, budget = time.monotonic(), req.get("budget")
        for i, test in enumerate(tests):
            left = float(req["wall_limit"]) if budget is None else float(budget) - (time.monotonic() - begun)
            if left <= 0:  # the candidate's time budget ran out: the tests left count as timeout
                note = {"status": "timeout", "error": f"not run: the candidate's time budget ({float(budget):.1f} s) "
                        "ran out", "stdout": "", "stderr": "", "cpu_s": 0.0, "wall_s": 0.0,
                        **({"calls": []} if req["kind"] == "assert" else {})}  # fmt: skip
                results += [dict(note) for _ in tests[i:]]
                break
            results.append(run_test(dict(req, wall_limit=min(float(req["wall_limit"]), left)), i, test, pfd, sandbox))
            if left < float(req["wall_limit"]) and results[-1]["status"] == "timeout":
                results[-1]["error"] = f"the candidate's time budget ({float(budget):.1f} s) ran out"
            if req.get("stop_on_failure") and results[-1]["status"] != "ok":
                break
    except _Stuck as e:
        problems.append(str(e))
        note = {"status": "runtime_error", "error": f"not run: {e}", "stdout": "", "stderr": "", "cpu_s": 0.0,
                "wall_s": 0.0, **({"calls": []} if req["kind"] == "assert" else {})}  # fmt: skip
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
    sys.set_int_max_str_digits(0)  # inherited: programs may print and read integers of any length
    signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED_SIGNALS)
    _prctl(PR_SET_DUMPABLE, 0)  # programs may not read our memory through /proc
    _prctl(PR_SET_CHILD_SUBREAPER, 1)  # should the zygote die, its orphans are still ours to kill
    private = "--private-tmp" in sys.argv
    if private:
        _private_scratch(int(sys.argv[sys.argv.index("--private-tmp") + 1]))
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
    guarded = _set_oom_score_adj(OOM_RUNNER)  # the supervisor, and the zygote forked below

    # before any request: the zygote never holds one
    sandbox = _Sandbox(ids, nproc, contained, own_ipc=contained or private)

    def send(obj):
        proto_out.write(json.dumps(obj).encode() + b"\n")
        proto_out.flush()

    send({"event": "ready", "pid": os.getpid(), "python": sys.version.split()[0], "workdir": workdir,
          "oom_guard": guarded})
    try:
        for line in proto_in:
            req = json.loads(line)
            del line
            try:
                response = handle(req, workdir, sandbox)
            except Exception as e:  # a runner fault: the host decides whose (a control program)
                response = {"id": req.get("id"), "error": f"{type(e).__name__}: {e}"[:2000]}
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
