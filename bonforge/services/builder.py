"""The warm builder of ``bonforge up``: a process that imports Prefect, the stages and the report once,
then forks one child per command that ``bonforge run`` hands to it (``hand_over``), over a Unix socket in a
private directory.

The child takes the caller's environment, working directory and terminal (stdin, stdout and stderr are
passed over the socket), runs the command as the caller would have (its output and errors go to the
caller's terminal) and sends back the exit code. A command dies with its caller: when the caller goes
(Ctrl-C, a kill), the child gets SIGINT. The builder declines a command (the caller then runs it by itself,
as without ``up``) unless it runs the same Python and the same bonforge, with none of the bonforge modules
it imported changed on disk since it started.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import struct
import sys
import threading
import traceback

log = logging.getLogger("bonforge")

# What a build imports; the builder imports it before it forks. Not Ray: it reads its configuration (token
# authentication among it) from the environment when imported, so a child imports it after taking the
# caller's, when a stage runs on Ray (a filter change does not).
PRELOAD = ("bonforge.cli", "bonforge.engine.prefect", "bonforge.flows.build", "bonforge.runtime.progress",
           "bonforge.report.plots", "bonforge.storage.catalog", "bonforge.storage.datasets", "prefect.flow_engine",
           "prefect.task_engine", "prefect.utilities.visualization", "fastapi", "anyio._backends._asyncio",
           "pyarrow.dataset")


def fingerprint() -> dict[str, tuple[int, int]]:
    """(mtime, size) of the file of every bonforge module imported so far."""
    out = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and (name == "bonforge" or name.startswith("bonforge.")):
            try:
                st = os.stat(path)
            except OSError:
                st = None
            out[path] = (st.st_mtime_ns, st.st_size) if st else (0, 0)
    return out


def _identity() -> dict:
    import importlib.util

    return {"python": sys.executable, "bonforge": importlib.util.find_spec("bonforge").origin}


def declined(request: dict, started: dict[str, tuple[int, int]]) -> str | None:
    """Why the builder must not run ``request`` (None: it may)."""
    mine = _identity()
    for what in ("python", "bonforge"):
        if request[what] != mine[what]:
            return f"it runs {what} {mine[what]}, this command {request[what]}"
    changed = sorted(path for path, stamp in fingerprint().items() if started.get(path, stamp) != stamp)
    if changed:
        return f"{len(changed)} bonforge module(s) changed since it started ({changed[0]}, ...): restart it " \
               f"with `bonforge down` and `bonforge up`"
    return None


# -- the wire: a length-prefixed pickle per message (the socket is the user's own, in a 0700 directory) -----
def _send(conn: socket.socket, obj, fds: list[int] = ()) -> None:
    data = pickle.dumps(obj)
    head = struct.pack("!Q", len(data))
    if fds:
        socket.send_fds(conn, [head], list(fds))
    else:
        conn.sendall(head)
    conn.sendall(data)


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError("the other side closed the connection")
        buf += chunk
    return bytes(buf)


def _recv(conn: socket.socket, maxfds: int = 0):
    fds: list[int] = []
    if maxfds:
        head, fds, _, _ = socket.recv_fds(conn, 8, maxfds)
    else:
        head = _recv_exact(conn, 8)
    if len(head) < 8:
        head += _recv_exact(conn, 8 - len(head))
    return pickle.loads(_recv_exact(conn, struct.unpack("!Q", head)[0])), fds


# -- what this process is: None in a caller; in a child of the builder, the caller's log levels and whether
# Prefect has taken the caller's settings yet (what a child runs is never handed over again) ----------------
_as_child: dict | None = None


# -- the caller's side ---------------------------------------------------------------------------------------


def hand_over(module: str, command: str, **kwargs) -> int | None:
    """Run the function ``command`` of ``module`` (``bonforge.cli``) with ``kwargs`` in the warm builder;
    returns its exit code, or None when there is no builder or it declines (the caller then runs it)."""
    import bonforge.services.warm as warm

    services = None if _as_child is not None else warm.current()
    if services is None:
        return None
    request = {**_identity(), "cwd": os.getcwd(), "env": dict(os.environ), "command": (module, command, kwargs),
               "levels": {name: logging.getLogger(name).level for name in ("", "bonforge")}}  # fmt: skip
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            conn.connect(services["builder"]["socket"])
            _send(conn, request, [0, 1, 2])
            kind, value = _recv(conn)[0]
        except (OSError, EOFError) as e:
            log.warning("the warm builder did not answer (%s): running here", e)
            return None
        if kind == "declined":
            log.warning("the warm builder declined (%s): running here", value)
            return None
        try:  # it runs: from here on, the command is not run again here
            return _recv(conn)[0][1]
        except (OSError, EOFError):
            log.error("error: the warm builder's process %d for this command died (see %s)", value,
                      services["builder"]["log"])
            return 1


# -- the builder's side --------------------------------------------------------------------------------------
def serve(path: str) -> None:
    """Import what builds need, then serve builds on the Unix socket ``path`` until killed."""
    import importlib

    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)  # as `bonforge run`
    for name in PRELOAD:
        importlib.import_module(name)
    _warm_the_report()
    _complete_prefect_models()
    started = fingerprint()
    if threading.active_count() > 1 or "ray" in sys.modules:  # a fork copies no thread; see PRELOAD for Ray
        raise RuntimeError(f"the builder cannot fork safely: threads {threading.enumerate()}, "
                           f"Ray imported: {'ray' in sys.modules}")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(16)
        server.settimeout(1.0)
        while True:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                _reap()
                continue
            conn.settimeout(None)
            if os.fork() == 0:
                server.close()
                try:
                    _child(conn, started)
                except BaseException:
                    traceback.print_exc()  # a failure of the builder's own, in its log
                finally:
                    os._exit(0)
            conn.close()
            _reap()


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _warm_the_report() -> None:
    """Draw one small figure with text: matplotlib loads its fonts and caches once, here."""
    import io

    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 1), dpi=50, layout="constrained")
    ax = fig.add_subplot()
    ax.bar(["a", "b"], [1, 2])
    ax.set_title("warm $p$")  # mathtext too
    fig.savefig(io.BytesIO(), format="png")


def _complete_prefect_models() -> None:
    """Build the validators of Prefect's pydantic models that defer them to first use (forward references):
    else every child builds those of a flow run and its tasks again (~0.1-0.2 s of CPU)."""
    import pydantic

    todo, models = [pydantic.BaseModel], []
    while todo:
        subclasses = todo.pop().__subclasses__()
        todo += subclasses
        models += [m for m in subclasses if m.__module__.startswith("prefect.") and not m.__pydantic_complete__]
    for model in models:
        model.model_rebuild(raise_errors=False)  # one that cannot complete yet does so on first use, as before


def _child(conn: socket.socket, started: dict) -> None:
    import random
    import signal

    global _as_child
    request, fds = _recv(conn, maxfds=3)
    reason = declined(request, started)
    if reason:
        _send(conn, ("declined", reason))
        return
    _send(conn, ("running", os.getpid()))
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    random.seed()  # not the builder's state, shared by every child
    _levels(request["levels"])
    _as_child = {"levels": request["levels"], "prefect_settled": False}  # see prefect_settings_from_caller
    done = threading.Event()

    def interrupt_when_the_caller_goes() -> None:
        try:
            conn.recv(1)
        except OSError:
            pass
        if not done.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_the_caller_goes, daemon=True).start()
    import importlib

    import typer

    module, name, kwargs = request["command"]
    command = getattr(importlib.import_module(module), name)
    log.info("running in the warm builder of `bonforge up` (pid %d)", os.getpid())
    code = 0
    try:
        command(**kwargs)
    except typer.Exit as e:
        code = e.exit_code
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except KeyboardInterrupt:
        code = 130
    except BaseException as e:  # what Python would print for an uncaught error of the command
        traceback.print_exception(e)
        code = 1
    done.set()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        _send(conn, ("exit", code))
    except OSError:
        pass
    _after_the_reply()


def _after_the_reply() -> None:
    """What a build's process does at exit, once the caller has its answer: Prefect's events go to the warm
    server, the Ray driver leaves the head."""
    from bonforge.services.prefect_server import drain_prefect_clients
    from bonforge.runtime.cluster import ray_up

    drain_prefect_clients()
    if ray_up():
        import ray

        ray.shutdown()


def _levels(levels: dict[str, int]) -> None:
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def prefect_settings_from_caller() -> None:
    """In a child of the builder, before its first use of Prefect: Prefect's settings and logging from the
    caller's environment (the builder read Prefect's when it imported Prefect), then the caller's log
    levels again. Once per child, and only in a build that uses Prefect (a rebuild with nothing to compute
    does not, and saves the ~0.2 s); elsewhere nothing."""
    if _as_child is None or _as_child["prefect_settled"]:
        return
    from prefect.context import refresh_global_settings_context
    from prefect.logging.configuration import setup_logging

    refresh_global_settings_context()
    setup_logging(incremental=False)
    _levels(_as_child["levels"])
    _as_child["prefect_settled"] = True
