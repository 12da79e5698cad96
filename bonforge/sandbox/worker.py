"""One sandbox worker on the host: a runner (a container, or a host process with backend 'process') and the
channel to it. ``_Worker`` sends a request (a ``wire.Request``) and reads its answer (bounded, in linear time,
a ``wire.Answer`` checked field by field); ``WorkerDied`` / ``WorkerHung`` say the runner failed, and the pool
(``pool.py``) decides whose failure that was."""

from __future__ import annotations

import json
import logging
import os
import select
import selectors
import shutil
import socket
import struct
import subprocess
import tempfile
import time

from bonforge.errors import SandboxError
from bonforge.sandbox import container
from bonforge.sandbox.wire import Answer, Request, WireError, max_answer_bytes

log = logging.getLogger("bonforge.sandbox")

class WorkerDied(SandboxError):
    """The runner stopped answering in the middle of a request."""


class WorkerHung(WorkerDied):
    """The runner gave no answer within the host's wall limit."""


def parse_answer(line: bytes, request: Request) -> Answer:
    """A runner's answer to ``request``, checked field by field (``wire.Answer.of``); ``WorkerDied`` saying what
    is off."""
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError, MemoryError):
        raise WorkerDied(f"garbled answer {line[:200]!r}") from None
    try:
        answer = Answer.of(doc, request)
    except (WireError, RecursionError) as e:
        raise WorkerDied(f"malformed answer: {e}") from None
    return Answer(answer.id, error=answer.error[:2000]) if answer.error is not None else answer


class _HostRunner:
    """The runner as a host process (backend 'process'), spoken to over its stdin/stdout."""

    demux = False

    def __init__(self, argv: list[str], name: str):
        self._err = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                         start_new_session=True)  # fmt: skip
        except OSError as e:
            self._err.close()
            raise SandboxError(f"cannot start sandbox worker {name}: {e}") from None
        self.fd = self.proc.stdout.fileno()

    def write(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def ended(self) -> bool:
        return self.proc.poll() is not None

    def stderr(self) -> str:
        try:
            self._err.seek(0)
            return self._err.read()[-1000:].decode(errors="replace").strip()
        except ValueError:  # closed: the worker was killed
            return ""

    def stop(self, grace: float) -> None:
        """Close its stdin (it exits on EOF), wait ``grace`` seconds, then kill."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._err.close()


class _Worker:
    """One runner, started by ``launch()`` (a ``_HostRunner`` or a ``container.ContainerRunner``). With
    ``socket_dir`` (Docker) it talks over a Unix socket the runner connects to from inside the container
    (Docker's attach stream costs ~1 ms of proxy CPU per request); else over the runner's own channel
    (stdin/stdout, or the container's attach stream). ``peer_ok(pid, uid, runner)`` decides whether a
    connecting process is this worker's runner (its credentials come from the kernel, ``SO_PEERCRED``); any
    other is turned away."""

    def __init__(self, launch, name: str, startup_timeout: float, socket_dir: str | None = None,
                 peer_ok=None):  # fmt: skip
        self.name = name
        self.sent = 0
        self.started_at = time.time()
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf known to hold no newline: every byte is looked at once
        self._dir = socket_dir
        self._sock: socket.socket | None = None
        listener = None
        if socket_dir:
            path = os.path.join(socket_dir, container.SOCKET_NAME)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            os.chmod(path, 0o600)
            container.give_to_runner(path)
            listener.listen(4)
        try:
            self.runner = launch()
        except SandboxError:
            self._cleanup(listener)
            if socket_dir:
                shutil.rmtree(socket_dir, ignore_errors=True)
            raise
        try:
            if listener is not None:
                self._sock = self._accept(listener, startup_timeout, peer_ok)
            self._fd = self._sock.fileno() if self._sock else self.runner.fd
            self._sel = selectors.DefaultSelector()
            self._sel.register(self._fd, selectors.EVENT_READ)
            line = self._read_line(startup_timeout, 65536)
            try:
                ready = json.loads(line)
            except (ValueError, RecursionError):
                ready = line[:200]
        except WorkerDied as e:
            self.kill(grace=0.0)
            raise SandboxError(f"sandbox worker {name} did not start: {e}") from None
        finally:
            self._cleanup(listener)
        if not isinstance(ready, dict) or ready.get("event") != "ready":
            self.kill(grace=0.0)
            raise SandboxError(f"sandbox worker {name} sent {ready!r} instead of ready")
        self.oom_guard = ready.get("oom_guard") is True

    def _accept(self, listener: socket.socket, timeout: float, peer_ok) -> socket.socket:
        deadline = time.monotonic() + timeout
        # a container's attached stderr wakes us when it exits; a host process is polled
        watched = [listener] if isinstance(self.runner, _HostRunner) else [listener, self.runner.fd]
        while True:
            while listener not in select.select(watched, [], [], 0.1)[0]:
                if self.runner.ended():
                    raise WorkerDied(f"exited (rc {self._exit_code()}) {self.runner.stderr()}".strip())
                if time.monotonic() > deadline:
                    raise WorkerDied(f"the runner did not connect within {timeout:.0f} s")
            conn = listener.accept()[0]
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            pid, uid, _ = struct.unpack("3i", creds)
            if peer_ok is None or peer_ok(pid, uid, self.runner):
                return conn
            log.warning("sandbox worker %s: turned away a connection from pid %d uid %d (not its runner)",
                        self.name, pid, uid)  # fmt: skip
            conn.close()

    def _exit_code(self) -> int | None:
        """The runner's exit code, if it comes within a second (it is exiting)."""
        for _ in range(50):
            if (code := self.runner.exit_code()) is not None:
                return code
            time.sleep(0.02)
        return None

    @staticmethod
    def _cleanup(listener: socket.socket | None) -> None:
        """Close the listening socket and remove its path: no second connection is possible."""
        if listener is not None:
            path = listener.getsockname()
            listener.close()
            try:
                os.unlink(path)
            except OSError:
                pass

    def _recv(self) -> bytes:
        """The next bytes the runner sent on the channel; b"" when it ended."""
        try:
            if self._sock is None and self.runner.demux:
                return self.runner.read()
            return os.read(self._fd, 1 << 20)
        except OSError:
            return b""

    def _read_line(self, timeout: float, limit: int) -> bytes:
        """The next line from the runner, in time linear in its length; over ``limit`` bytes it is refused."""
        deadline = time.monotonic() + timeout
        while (end := self._buf.find(b"\n", self._scanned)) < 0:
            self._scanned = len(self._buf)
            if self._scanned > limit:
                raise WorkerDied(f"an answer over {limit} bytes")
            left = deadline - time.monotonic()
            if left <= 0 or not self._sel.select(left):
                raise WorkerHung(f"no answer within {timeout:.1f} s")
            chunk = self._recv()
            if not chunk:
                raise WorkerDied(f"runner exited (rc {self._exit_code()}) {self.runner.stderr()}".strip())
            self._buf += chunk
        with memoryview(self._buf) as view:
            line = bytes(view[:end])  # one copy of a long answer (a slice would make two)
        if end + 1 == len(self._buf):
            self._buf = bytearray()  # nothing behind it: a large buffer is given back, not kept per worker
        else:
            del self._buf[: end + 1]
        self._scanned = 0
        if len(line) > limit:
            raise WorkerDied(f"an answer over {limit} bytes")
        return line

    def send(self, request: Request, line: bytes | None = None) -> None:
        """Write ``request`` (or its ``line``, already encoded) to the runner."""
        self.sent += 1
        data = line if line is not None else json.dumps(request.doc()).encode() + b"\n"
        try:
            if self._sock is not None:
                self._sock.sendall(data)
            else:
                self.runner.write(data)
        except OSError as e:
            raise WorkerDied(f"cannot write to runner: {e}") from None

    def read(self, request: Request, timeout: float) -> Answer:
        """The runner's answer to ``request`` (the oldest one in flight), checked (``parse_answer``)."""
        return parse_answer(self._read_line(timeout, max_answer_bytes(request)), request)

    def oom_killed(self, since: float) -> bool:
        """Whether the kernel's OOM killer struck in this worker's container since ``since`` (Unix time)."""
        return isinstance(self.runner, container.ContainerRunner) and self.runner.oom_killed(since)

    def kill(self, grace: float = 2.0) -> None:
        """End the channel (the runner exits on EOF; a thread reading it wakes) and stop the runner (a
        container is removed at once; a host process gets ``grace`` seconds). The socket and selector are
        closed when the worker is dropped: a thread may still be reading."""
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.runner.stop(grace)
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
