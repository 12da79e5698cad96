"""A build without Prefect or Ray (each node through ``run_node`` in this process), or a ``gc``, run as a
child process that the crash tests kill: ``python crash_build.py STORE RECIPE [--set a.b=c ...]`` prints the
run record as JSON; ``python crash_build.py STORE --gc N`` collects.

``python crash_build.py --serve`` is a fork server: it imports all that once, then forks one such child per
request (``Forks``), each in a process group of its own, so that a kill point costs a build, not an interpreter's
start and imports (seconds on a loaded machine). A forked child is a whole build process like the others."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from bonforge.config import load_recipe
from bonforge.engine.run import Run, execute
from bonforge.engine.shards import run_node
from bonforge.flows.build import dag
from bonforge.stage import Node, Ref
from bonforge.storage.store import StageStore


class LocalRun(Run):
    def __call__(self, node: Node) -> Ref:
        if self.store.exists(node.stage.name, node.key):
            return self._note(node, self.store.manifest(node.stage.name, node.key), True, 0.0)
        t0 = time.perf_counter()
        return self._note(node, run_node(self.store, node), False, time.perf_counter() - t0)


def build(store: str | Path, recipe: str | Path, *sets: str) -> dict:
    """The run record of a build of ``recipe`` (with the ``--set`` overrides ``sets``) into ``store``, every
    node in this process."""
    r = load_recipe(str(recipe), list(sets))
    return execute(dag, LocalRun(StageStore(store), r), str(Path(recipe).parent), None, record_start=True).json()


def contents(store: Path, record: dict) -> tuple[str, str]:
    """The content hashes of a run's GenSelect and RL datasets."""
    return tuple(json.loads((Path(store) / record[k] / "manifest.json").read_text())["content_sha256"]
                 for k in ("dataset", "rl_dataset"))


def main(argv: list[str]) -> None:
    if argv[1] == "--gc":
        from bonforge.storage.gc import collect

        print(json.dumps(collect(StageStore(argv[0]), int(argv[2]))))
        return
    print(json.dumps(build(argv[0], argv[1], *(v for k, v in zip(argv[2::2], argv[3::2]) if k == "--set"))))


# What a build imports only when it runs (its client, its report and export, httpx's transports): imported by
# the fork server once, not by every child (about 1 s each on a loaded 2-core machine).
PRELOAD = ("bonforge.llm.openai", "bonforge.report.summary", "bonforge.report.open_ended", "bonforge.storage.datasets",
           "bonforge.storage.card", "bonforge.storage.splits", "bonforge.engine.lineage", "bonforge.runtime.progress",
           "httpcore", "h2.connection", "trio", "anyio._backends._asyncio", "pyarrow.acero", "pyarrow.dataset")


def serve() -> None:
    """Per line of stdin ``{"argv": [...], "log": path}``: fork a child that runs ``main(argv)`` with its
    output in ``log`` (its errors in ``log.err``) and its exit code in ``log.rc``; answer the child's pid."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(job["argv"], job["log"])
        try:
            os.setpgid(pid, pid)  # as the child does: its group exists before anyone is told its pid
        except OSError:  # it has done so, or is gone already
            pass
        print(pid, flush=True)


def _child(argv: list[str], log: str) -> None:
    os.setpgid(0, 0)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, path in ((1, log), (2, f"{log}.err")):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    code = 0
    try:
        main(argv)
    except BaseException:  # noqa: BLE001 (reported in the log, like an interpreter would)
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    Path(f"{log}.rc").write_text(str(code))
    os._exit(code)


class Forked:
    """A child of the fork server, as much of a ``Popen`` as the tests use: ``pid`` (also its process
    group's), ``poll`` and ``wait`` (the exit code is in its ``.rc`` file)."""

    def __init__(self, pid: int, log: Path):
        self.pid, self.log, self.returncode = pid, log, None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                os.kill(self.pid, 0)
                return None
            except ProcessLookupError:
                rc = Path(f"{self.log}.rc")
                self.returncode = int(rc.read_text()) if rc.is_file() else -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.01)
        return self.returncode


class Forks:
    """The fork server, started with ``env`` and its logs in folder ``logs``; a context manager."""

    def __init__(self, env: dict, logs: Path):
        self.logs, self.count = logs, 0
        logs.mkdir(parents=True, exist_ok=True)
        self.server = subprocess.Popen([sys.executable, __file__, "--serve"], env=env, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, start_new_session=True)

    def start(self, argv: list[str]) -> Forked:
        self.count += 1
        log = self.logs / f"child-{self.count}.log"
        self.server.stdin.write(json.dumps({"argv": argv, "log": str(log)}) + "\n")
        self.server.stdin.flush()
        return Forked(int(self.server.stdout.readline()), log)

    def run(self, argv: list[str], timeout: float = 300) -> dict:
        """A child run to completion; its run record (its last line of output)."""
        from procs import kill_group

        child = self.start(argv)
        try:
            code = child.wait(timeout)
        finally:
            kill_group(child)
        assert code == 0, Path(f"{child.log}.err").read_text()[-3000:]
        return json.loads(child.log.read_text().strip().splitlines()[-1])

    def __enter__(self) -> "Forks":
        return self

    def __exit__(self, *exc) -> None:
        self.server.stdin.close()
        try:
            self.server.wait(30)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()


if __name__ == "__main__":
    serve() if sys.argv[1:] == ["--serve"] else main(sys.argv[1:])
