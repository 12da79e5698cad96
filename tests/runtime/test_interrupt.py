"""Ctrl-C and SIGTERM (``bonforge.runtime.interrupt``): a process whose main thread is stuck in a C call, and
real `bonforge run` builds in a terminal (a pty, the signal sent to the whole foreground process group as a
terminal's Ctrl-C is) at several moments, then resumed."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "gsm8k-genselect.yaml"


def test_a_main_thread_in_a_long_c_call_is_ended_by_the_watchdog_with_its_last_words(tmp_path):
    """A second lock of a held pthread mutex (through ctypes, which lets the GIL go, as a model's forward pass or
    a query does) never returns to the interpreter's loop: the first signal's handler cannot run. The watchdog
    ends the process within the grace time, after the registered last words."""
    words = tmp_path / "words"
    code = textwrap.dedent(f"""
        import sys
        from bonforge.runtime import interrupt
        interrupt.last_words.append(lambda: open({str(words)!r}, "w").write("recorded"))
        with interrupt.stoppable():
            print("ready", flush=True)
            import ctypes
            libc, mutex = ctypes.CDLL(None), ctypes.create_string_buffer(64)
            libc.pthread_mutex_lock(mutex)
            libc.pthread_mutex_lock(mutex)  # waits for ever, whatever signal comes
        print("returned", flush=True)
    """)
    for sig, rc in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        words.unlink(missing_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == "ready\n"
        time.sleep(0.3)  # inside the C loop
        t0 = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
        assert time.monotonic() - t0 < 5 + 2  # the grace time, and a loaded machine's slack
        assert proc.returncode == rc
        assert "returned" not in out
        assert err.strip() == interrupt_line(sig)
        assert words.read_text() == "recorded"


def test_a_second_signal_stops_at_once_and_a_python_loop_stops_on_the_first(tmp_path):
    code = textwrap.dedent("""
        import time
        from bonforge.runtime import interrupt
        with interrupt.stoppable():
            try:
                print("ready", flush=True)
                while True:
                    time.sleep(0.01)
            finally:  # a slow clean-up (a build's finally blocks): the second signal must not wait for it
                print("cleaning up", flush=True)
                interrupt.say(interrupt.message(interrupt.received()))
                while True:
                    time.sleep(0.01)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGINT)
    assert proc.stdout.readline() == "cleaning up\n"  # the first: an exception in Python code
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 2
    assert proc.returncode == 130
    assert err.strip() == interrupt_line(signal.SIGINT)  # said once, though both the handler and the code said it


def interrupt_line(sig: int) -> str:
    from bonforge.runtime.interrupt import message

    return message(sig)


class Terminal:
    """`bonforge run` in a pty, leading its own process group as a shell's foreground job does."""

    def __init__(self, store: Path, *args: str):
        master, slave = pty.openpty()
        env = {**os.environ, "COLUMNS": "120"}
        self.proc = subprocess.Popen([sys.executable, "-m", "bonforge", "run", str(RECIPE), "--store", str(store),
                                      "--set", "problems.limit=6", *args],
                                     stdin=slave, stdout=slave, stderr=slave, start_new_session=True, env=env,
                                     cwd=REPO)
        os.close(slave)
        self.master, self.out = master, ""

    def wait_for(self, pattern: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.out):
            assert time.monotonic() < deadline, f"no {pattern!r} in:\n{self.out[-3000:]}"
            assert self._read(0.2) or self.proc.poll() is None, f"ended before {pattern!r}:\n{self.out[-3000:]}"

    def _read(self, wait: float) -> bool:
        if select.select([self.master], [], [], wait)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the other side closed
                return False
            self.out += chunk.decode(errors="replace").replace("\r\n", "\n")
            return bool(chunk)
        return True

    def signal_group(self, sig: int) -> float:
        os.killpg(self.proc.pid, sig)
        return time.monotonic()

    def finish(self, timeout: float = 600) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.2)
        while self._read(0.05) and select.select([self.master], [], [], 0)[0]:
            pass
        os.close(self.master)
        return self.proc.wait(timeout=max(deadline - time.monotonic(), 1))


def last_run(store: Path, out: str) -> dict:
    records = sorted((store / "runs").glob("*.json"), key=lambda p: p.stat().st_mtime)
    assert records, f"no run record in {store} ({sorted(str(p) for p in store.rglob('*'))[:20]}):\n{out[-3000:]}"
    return json.loads(records[-1].read_text())


@pytest.mark.slow
def test_ctrl_c_and_sigterm_at_several_moments_of_a_build_then_the_same_command_resumes(tmp_path, gsm8k_pool):
    store = tmp_path / "store"
    # the last moment's build has a filter of its own: the builds before it may have committed every stage (a
    # streaming build runs the assembly right behind the verdicts), and its problem_stats is then still to compute
    other = ("--set", "filter.max_pass_rate=0.9")
    moments = [  # (what the build printed last, the signal(s), the exit code, the build's own settings)
        (r"starting the Prefect flow", [signal.SIGINT], 130, ()),  # the services start, the first stage begins
        (r"verdicts\[\S+\]\s+\d+ rows\s+computed", [signal.SIGTERM], 143, ()),  # a stage committed, the next runs
        (r"problem_stats\s+\d+ rows\s+computed", [signal.SIGINT, signal.SIGINT], 130, other),  # the assembly; twice
    ]
    for pattern, sigs, rc, args in moments:
        term = Terminal(store, *args)
        term.wait_for(pattern)
        t0 = term.signal_group(sigs[0])
        for sig in sigs[1:]:
            time.sleep(0.2)
            term.signal_group(sig)
        assert term.finish(timeout=60) == rc, term.out[-3000:]
        assert time.monotonic() - t0 < 5 + 3, term.out[-3000:]  # 5 s, and a loaded machine's slack
        lines = [x for x in term.out.splitlines() if x.startswith("interrupted:")]
        assert lines == [interrupt_line(sigs[0])], repr(term.out[-1500:])
        assert "Traceback" not in term.out, term.out[-3000:]
        assert "anonymous usage" not in term.out  # Prefect's telemetry notice on a new PREFECT_HOME
        record = last_run(store, term.out)
        assert record["status"] == "interrupted", (pattern, record.get("error"), term.out[-2000:])
    term = Terminal(store, *other)  # the same command resumes: what the interrupted builds committed is reused
    assert term.finish() == 0, term.out[-3000:]
    assert re.search(r"verdicts\[\S+\]\s+\d+ rows\s+cached", term.out), term.out[-3000:]
    assert last_run(store, term.out)["status"] == "succeeded"
    leftovers = subprocess.run(["pgrep", "-f", f"--store {store}"], capture_output=True, text=True).stdout.split()
    assert leftovers == []
