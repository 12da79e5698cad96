"""The zygote and the test's child: the runner's processes that hold a candidate's program.

The zygote is forked by the supervisor (``runner.py``) before it reads any request and does nothing but fork
one child per test and reap every process that ends up its own (a subreaper). The child enters the sandbox
(``_enter_sandbox``: session, rlimits, the sandbox uid) and runs the program as CPython runs a script.
Standard library only (in the image beside ``runner.py``).
"""

import atexit
import builtins
import fcntl
import gc
import io
import marshal
import os
import resource
import signal
import socket
import sys
import weakref

import codec
import oskit

MEM_EXIT = 86  # a child's exit code after MemoryError (also reported on the result pipe)
RESULT_FD, SETUP_FD = 3, 4  # a child's result pipe, and its set-up pipe (closed before the program runs)


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
    stdin_r, out_w, err_w, res_w, setup_w, payload_fd, *cgroup = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in fds]
    os.dup2(setup_w, SETUP_FD)
    try:
        os.setsid()
        os.dup2(stdin_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(res_w, RESULT_FD)
        payload = marshal.loads(os.pread(payload_fd, os.fstat(payload_fd).st_size, 0))
        if cgroup:  # the test's memory cgroup, joined after the request is read (its inputs are not the test's)
            os.write(cgroup[0], b"0")
        os.closerange(SETUP_FD + 1, 65536)
        os.chdir(payload["workdir"])
        cpu = max(1, int(payload["time_limit"] + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        mem = int(payload["memory_mb"]) * 1024 * 1024
        if payload["address_limit"]:  # off where a test cgroup binds the test's memory, and for a JVM
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        # No stack limit of its own where the hard limit allows: the main thread's stack may grow up to the
        # address-space limit (deep recursion), while a new process's threads get the C library's default
        # stack size (it takes the soft limit when finite: a soft limit of ``mem`` would make every thread of
        # a subprocess reserve ``mem`` of address space, which RLIMIT_AS refuses).
        stack_hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
        stack = stack_hard if stack_hard == resource.RLIM_INFINITY else min(oskit.STACK_BYTES, stack_hard)
        resource.setrlimit(resource.RLIMIT_STACK, (stack, stack_hard))
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(payload["file_limit"] or 16 << 20),) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc:  # backend process with its own uid per worker (in Docker the pids cgroup counts)
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        # with CAP_SYS_RESOURCE also its floor: the program cannot go below
        oskit.set_oom_score_adj(oskit.OOM_CANDIDATE)
        if ids:  # drop to the sandbox uid: every capability is lost with it
            os.setgroups([])
            os.setresgid(ids[1], ids[1], ids[1])
            os.setresuid(ids[0], ids[0], ids[0])
            # Left not dumpable (as the uid change makes it): its /proc entries stay root's, so the program
            # cannot write its oom_score_adj back down (a process it execs can, to the floor, see oskit.OOM_RUNNER).
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
    if req.get("argv"):
        _exec(req["argv"])
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
            emit(codec.value_line(value))
            os._exit(0)
        for args, kwargs in test["calls"]:
            try:
                decode = codec.decode_value
                value = fn(*[decode(a) for a in args], **{k: decode(a) for k, a in kwargs.items()})
            except MemoryError:
                raise
            except BaseException as e:
                emit("x " + codec.exception_line(e))
                try:
                    sys.stderr.write(_format_error(e, {"solution.py": source}))
                except BaseException:
                    pass
                if not test.get("go_on"):
                    break
                continue
            emit(codec.value_line(value))
        emit("d")
        os._exit(0)
    except MemoryError:
        emit("m")
        os._exit(MEM_EXIT)
    except BaseException as e:
        failed(e)


def _exec(argv):
    """Replace the child by a compiled program (or a compiler): ``argv`` searched on PATH. The result pipe is
    closed on exec (a program cannot write claims there); a program that cannot start reports it."""
    fcntl.fcntl(RESULT_FD, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        os.write(RESULT_FD, f"e cannot start {argv[0]}: {e.strerror}".encode() + b"\n")
    os._exit(127)


def compile_program(req):
    """(source, program code) of ``req`` (a ``wire.Request``), compiled once per request in the runner: children
    inherit them. Compilation is bounded (CPython folds no large constants); a failure is the candidate's."""
    source = req.prelude + req.program
    try:
        code = compile(source, "solution.py", "exec")
    except SyntaxError as e:
        if req.kind != "stdio" or e.msg != "'return' outside function":
            raise
        # As the APPS harness does: a script that returns at top level runs as a function body.
        body = "".join("    " + ln for ln in req.program.splitlines(True))
        code = compile(f"{req.prelude}def _main():\n{body}\n_main()\n", "solution.py", "exec")
    return source, code


def serve(sock, ids, nproc):
    """The zygote's loop: fork one child per test and reap every process that ends up ours (we are a
    subreaper). When the child has exited: ``D <wait status> <CPU seconds>`` if no process of the test is
    left (the CPU of all of them), else ``S <wait status>`` and, once the rest are reaped, ``D``; ``E`` when
    it cannot fork. Never returns."""
    keep = sock.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, 65536)
    oskit.prctl(oskit.PR_SET_CHILD_SUBREAPER, 1)
    oskit.prctl(oskit.PR_SET_NO_NEW_PRIVS, 1)  # set once here: every child inherits it, and it cannot be unset
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
