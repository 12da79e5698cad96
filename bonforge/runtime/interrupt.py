"""Ctrl-C and a scheduler's SIGTERM during a build: stop soon, say so in one line, keep what is committed.

``stoppable()`` wraps a command in the main thread. The first SIGINT or SIGTERM raises ``Interrupted`` there
(a ``KeyboardInterrupt``, so code that lets Ctrl-C through lets it through too); the build's ``finally``
blocks stop its services, and its run record says ``interrupted``. Shards already committed stay committed
(every shard is written under a temporary name and renamed), so rerunning the same command resumes.

Python runs a signal handler only between bytecodes of the main thread: a main thread stuck in a long C
call (a model's forward pass, a large query) would not see it for minutes. A watchdog therefore gives the
main thread ``GRACE_S`` seconds; past that it runs the registered last words (the run record) and ends the
process with the exit code a shell expects (128 + the signal). A second signal ends it at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

GRACE_S = 4.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []  # the signals seen (by our handler, or by the watchdog)
_handled: list[int] = []  # those our handler raised for
_said: list[str] = []
_said_lock = threading.Lock()
_ending = threading.Lock()


class Interrupted(KeyboardInterrupt):
    """The build was stopped by SIGINT or SIGTERM."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def as_interrupt(error: BaseException) -> Interrupted | None:
    """``error`` as an ``Interrupted`` when a signal caused it: Ctrl-C's ``KeyboardInterrupt``, or the
    ``TerminationSignal`` that Prefect's flow engine raises for SIGTERM in place of our handler.

    The signal may surface as another error that it caused (Prefect's task engine, stopped while it sets up
    a task run, raises ``ValueError: Task run is not set``): any error once a signal came is the signal's."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, Interrupted):
            return cause
        if isinstance(cause, KeyboardInterrupt):
            return Interrupted(signal.SIGINT)
        if type(cause).__name__ == "TerminationSignal" and getattr(cause, "signal", None) in SIGNALS:
            return Interrupted(cause.signal)
        cause = cause.__cause__ or cause.__context__
    return Interrupted(_received[0]) if _received else None


def message(signum: int) -> str:
    name = signal.Signals(signum).name
    return f"interrupted: {name} received; what was committed is kept: rerun the same command to resume"


# What the watchdog runs before it ends the process (quick, e.g. writing the run record): append, then remove.
last_words: list[Callable[[], None]] = []


def received() -> int | None:
    """The signal that stopped this process's command, if one did."""
    return _received[0] if _received else None


@contextlib.contextmanager
def stoppable() -> Iterator[None]:
    """SIGINT and SIGTERM stop the block as described above; outside the main thread, nothing changes.

    The interpreter's C-level handler writes each signal's number to a wakeup pipe at once, even while the
    main thread is in a long C call; the watchdog thread waits on that pipe, so its grace time starts with
    the signal, not with the main thread's next bytecode."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame) -> None:
        if _handled:  # the second signal: at once
            _end(_received[0])
        _handled.append(signum)
        if not _received:  # (the watchdog may have noted it first, from the wakeup pipe)
            _received.append(signum)
        raise Interrupted(signum)

    r, w = os.pipe()
    os.set_blocking(w, False)
    old = {s: signal.signal(s, handler) for s in SIGNALS}
    old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    watchdog = threading.Thread(target=_watchdog, args=(r,), daemon=True, name="bonforge-interrupt")
    watchdog.start()
    try:
        yield
    except BaseException as e:
        stop = as_interrupt(e)
        if stop is None or stop is e:
            raise
        raise stop from None
    finally:
        signal.set_wakeup_fd(old_fd)
        for s, h in old.items():  # once stopped, a second signal while the process winds down ends it at once
            signal.signal(s, (lambda signum, frame: _end(_received[0])) if _received else h)
        os.write(w, b"\0")  # the block is over: the watchdog stops
        watchdog.join(timeout=1)
        os.close(w)


def _watchdog(r: int) -> None:
    """First signal: give the main thread ``GRACE_S`` to stop, then end the process; a second: at once."""
    import select

    deadline, first = None, None
    while True:
        wait = None if deadline is None else max(deadline - time.monotonic(), 0)
        if not select.select([r], [], [], wait)[0]:  # the grace time is over
            _end(first)
        for signum in os.read(r, 64):
            if signum == 0:  # the block ended
                os.close(r)
                return
            if signum not in SIGNALS:
                continue
            if first is not None:
                _end(first)
            first, deadline = signum, time.monotonic() + GRACE_S
            if not _received:  # another handler than ours took it (Prefect's, for SIGTERM in a flow)
                _received.append(signum)


def _end(signum: int) -> None:
    """End the process now: the last words, the line, the shell's exit code. Takes no lock that the interrupted
    main thread may hold (a stream's buffer): only os.write, and waits for another ending thread a moment only."""
    if _ending.acquire(timeout=2):  # one thread ends it; another that cannot finish is not waited for long
        for fn in list(last_words):
            with contextlib.suppress(BaseException):
                fn()
        say(message(signum), flush=False)
    os._exit(128 + signum)


def say(line: str, flush: bool = True) -> None:
    """Write ``line`` to the process's stderr, once per process (the main thread and the watchdog may both
    try). Straight to file descriptor 2: a progress display may hold ``sys.stderr`` in a buffer of its own, which
    ``os._exit`` would drop."""
    if not _said_lock.acquire(timeout=1):
        return
    try:  # held while writing: a thread that finds it said waits until it is written, then may exit
        if _said:
            return
        _said.append(line)
        with contextlib.suppress(OSError, ValueError):
            if flush:
                sys.stderr.flush()
            os.write(2, ("\n" if _mid_line() else "").encode() + line.encode() + b"\n")
    finally:
        _said_lock.release()


def _mid_line() -> bool:
    """Whether a terminal's cursor may stand after a progress bar (then the line starts on a new one)."""
    return os.isatty(2)
