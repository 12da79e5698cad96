"""A warm pool of runners: long-lived containers (backend 'docker') or host processes ('process').

Each worker is one runner (``runner.py``) spoken to over its stdin/stdout (for Docker, the attached
``docker run -i`` stream). ``SandboxPool.run(requests)`` sends each request to a free worker and returns
one outcome per request, in order:

* ``{"results": [...], ...}``: the runner's response;
* ``{"sandbox_error": msg}``: the sandbox failed on every attempt and a known-good control program failed
  on a fresh worker too (or no worker could start), or the request itself is out of shape (``wire.Request``,
  checked once here: it is never sent, the message names the field): never the candidate's fault;
* ``{"runner_killed": msg}``: the runner failed (died, faulted, garbled its answer) while running this
  program on every attempt, each time on a fresh worker, while the control program passed: the program's
  fault (a candidate failure);
* a runner that gives no answer within the host's own wall limit (the sum of the tests' wall limits plus
  ``HOST_MARGIN_S``, counted from when the request could start) is killed, and the request gets a
  ``timeout`` result for every test.

A worker is replaced after ``recycle_after`` candidates and after any anomaly (death, timeout, a
request it could not clean up after). Containers are labelled; leftovers of dead owners are removed at
start and every container of the pool at close (also at interpreter exit).
"""

from __future__ import annotations

import atexit
import collections
import itertools
import logging
import math
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

from bonforge.errors import SandboxError
from bonforge.sandbox import container
from bonforge.sandbox import image as image_mod
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.lanes import Background, Job, Lanes
from bonforge.sandbox.wire import LOAD_STRETCH, Request, Status, WireError, not_run
from bonforge.sandbox.worker import WorkerDied, WorkerHung, _HostRunner, _Worker

log = logging.getLogger("bonforge.sandbox")

PIPELINE_DEPTH = 2  # requests per worker while the queue is long: the next is already there when one finishes
# A request larger than this is never sent ahead while another runs on its worker: the runner does not read
# while it runs one, so a large request would fill the channel's buffer and block the host's write, while
# the runner, done, blocks writing a large answer the host does not read (both stuck: measured with
# Library Checker's megabyte tests). A request this small fits in a socket's or a pipe's buffer.
PIPELINE_MAX_BYTES = 32 << 10
HOST_MARGIN_S = 2.0  # the host's wall limit per request: the tests' wall limits (+0.25 s each) plus this
CONTROL_INPUT = "bonforge control 42\n"  # a known-good program echoes it: is the sandbox itself sound?
_names = itertools.count()


MAX_WAIT_S = 86400.0  # the most the host waits for one test of a request, whatever the request says


def _seconds(value, default: float) -> float:
    """``value`` as seconds when it is a positive finite number (at most ``MAX_WAIT_S``), else ``default``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return min(float(value), MAX_WAIT_S) if ok else default


def _typed(request: dict | Request) -> Request:
    """A caller's request as the wire's ``Request``, checked once here (``WireError`` naming the field out of
    shape)."""
    return request if isinstance(request, Request) else Request.read(request)


_netns_prefix: list[str] | None = None
_uids = itertools.count()


def process_argv(cfg: CodeVerifyConfig) -> list[str]:
    """The runner on the host, in a new network namespace when ``unshare`` is permitted. Run as root, its
    tests get a uid of their own per worker (then RLIMIT_NPROC counts that worker's processes only, and
    the program cannot signal or ``prlimit`` the runner); else they run as the host user."""
    global _netns_prefix
    if _netns_prefix is None:
        _netns_prefix = []
        if shutil.which("unshare"):
            # as root, mount and IPC namespaces of its own too: the runner mounts a private /tmp, /dev/shm, ...
            private = [["unshare", "--mount", "--ipc", "--net"]] if os.geteuid() == 0 else []
            for prefix in (*private, ["unshare", "--net"], ["unshare", "--user", "--map-root-user", "--net"]):
                if subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
                    _netns_prefix = prefix
                    break
        log.warning(
            "sandbox backend 'process' runs untrusted code ON THIS HOST with rlimits only: no filesystem, "
            "memory-cgroup or pid isolation%s%s. Use it only for trusted pools; prefer backend 'docker'.",
            "" if _netns_prefix else ", and NO network isolation (unshare not permitted)",
            "" if os.geteuid() == 0 else ", and tests run as this user (they can signal and prlimit the runner)",
        )
    ids = []
    if os.geteuid() == 0:
        uid = (1 << 30) + (os.getpid() << 8) + next(_uids) % 256  # distinct per pool process and worker
        ids = ["--uid", f"{uid}:{uid}", "--nproc", str(cfg.pids_limit)]
    if "--mount" in _netns_prefix:
        ids += ["--private-tmp", str(cfg.tmpfs_mb)]
    return [*_netns_prefix, sys.executable, "-u", str(image_mod.RUNNER_PATH), *ids]


_live_pools: weakref.WeakSet[SandboxPool] = weakref.WeakSet()


@atexit.register
def _close_live_pools() -> None:
    for pool in list(_live_pools):
        pool.close()


class SandboxPool:
    """``pool_size`` warm runners. Use as a context manager; ``run`` is safe from several threads."""

    def __init__(self, cfg: CodeVerifyConfig):
        self.cfg = cfg
        self.image: str | None = None
        self._slots: queue.Queue[list] = queue.Queue()
        self._workers: set[_Worker] = set()
        self._lock = threading.Lock()
        self._started = False
        self._closed = False
        self._busy = 0  # runs in progress
        self._used = time.monotonic()  # when the last run ended (or the pool was handed out)

    def __enter__(self) -> SandboxPool:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """Prepare the image and start every worker (in parallel)."""
        with self._lock:
            if self._started:
                return
            if self.cfg.backend == "docker":
                image_mod.cleanup_containers(all_owners=False)
                container.remove_dead_socket_dirs()
                self.image = image_mod.ensure_image(self.cfg.image, self.cfg.build_image)
            self._started = True
            _live_pools.add(self)
        slots = [[None, None] for _ in range(self.cfg.pool_size)]  # [worker, its replacement starting]
        with ThreadPoolExecutor(self.cfg.pool_size) as ex:
            list(ex.map(self._ensure, slots))
        for slot in slots:
            self._slots.put(slot)

    def _spawn(self) -> _Worker:
        if self._closed:
            raise SandboxError("the sandbox pool is closed")
        name = f"bonforge-sbx-{os.getpid()}-{next(_names)}"
        if self.cfg.backend != "docker":
            argv = process_argv(self.cfg)
            worker = _Worker(lambda: _HostRunner(argv, name), name, self.cfg.startup_timeout_s)
        else:
            socket_dir = container.socket_folder(self.cfg) if self.cfg.transport == "socket" else None
            worker = _Worker(lambda: container.start_container(self.cfg, self.image, name, socket_dir), name,
                             self.cfg.startup_timeout_s, socket_dir, container.is_runner)  # fmt: skip
        with self._lock:
            closed = self._closed
            if not closed:
                self._workers.add(worker)
        if closed:  # closed while it started (a replacement in the background)
            worker.kill()
            raise SandboxError("the sandbox pool is closed")
        return worker

    def _ensure(self, slot: list) -> None:
        """The slot's worker: the replacement started in the background when there is one, else a new one."""
        if slot[0] is None:
            pending, slot[1] = slot[1], None
            slot[0] = self._spawn() if pending is None else pending.result()

    def _replace_later(self, slot: list) -> None:
        """Start the replacement of a slot's lost worker now, in the background: the next request on the slot
        does not wait for a whole container start, and the start is the cost of the batch that lost it."""
        if slot[0] is None and slot[1] is None and not self._closed:
            slot[1] = Background(self._spawn)

    def _discard(self, slot: list, hung: bool = False) -> None:
        """Stop the slot's worker; a hung one (it may be stopped or frozen) is killed at once."""
        worker, slot[0] = slot[0], None
        if worker is None:
            return
        with self._lock:
            self._workers.discard(worker)
        worker.kill(grace=0.0 if hung else 2.0)

    def request_timeout(self, request: Request) -> float:
        """The host's own wall limit for a request, from when the runner can start it: what the runner may
        take on a busy machine (its ``stretch``, ``wire.LOAD_STRETCH`` unless it runs alone, times each wall
        limit: its tests' (+0.25 s each), or its ``budget`` + 1 s when that is less, plus its build's (+0.25 s))
        and ``HOST_MARGIN_S``. A limit that is not a positive finite number counts as the pool's own (never an
        exception: one request's values)."""
        stretch = _seconds(request.stretch, LOAD_STRETCH)
        wall = _seconds(request.wall_limit, self.cfg.wall_limit_s) * stretch
        limit = len(request.tests) * (wall + 0.25)
        if request.budget is not None:
            limit = min(limit, _seconds(request.budget, limit) * stretch + 1.0)
        if request.build is not None:  # a native program's build, once before its tests: its own wall limit
            limit += _seconds(request.build.wall_limit, self.cfg.wall_limit_s) * stretch + 0.25
        return limit + HOST_MARGIN_S

    streams_outcomes = True  # ``run`` hands each outcome to ``on_outcome`` as it arrives

    def run(self, requests: list[dict], on_outcome=None) -> list[dict]:
        """Run every request; outcomes in the same order, each with ``latency_s`` added. With
        ``on_outcome(index, outcome)``, each outcome is handed to it as it arrives (on a pool thread) and
        what it returns is kept instead: a batch need not hold every program's output at once."""
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox pool is closed")
            self._busy += 1
        try:
            return self._run(requests, on_outcome)
        finally:
            with self._lock:
                self._busy -= 1
                self._used = time.monotonic()

    def _run(self, requests: list[dict], on_outcome) -> list[dict]:
        if not self._started:
            self.start()
        jobs = [Job(i, r, on_outcome) for i, r in enumerate(requests)]
        todo: queue.Queue[Job] = queue.Queue()
        for job in jobs:
            try:
                job.request = _typed(job.request)
            except WireError as e:  # one request's values: its outcome, never the batch's exception
                self._finish(job, {"sandbox_error": f"a malformed sandbox request, not sent: {e}"})
                continue
            todo.put(job)
        if todo.empty():
            return [job.outcome for job in jobs]
        width = min(self.cfg.pool_size, todo.qsize())
        lanes = Lanes()
        drivers = [Background(self._drive, todo, width, lanes) for _ in range(width)]
        try:
            for driver in drivers:
                driver.result()
        except BaseException:  # Ctrl-C or a bug: stop feeding workers; the caller closes the pool
            while not todo.empty():
                todo.get_nowait()
            raise
        return [job.outcome for job in jobs]

    def _drive(self, todo: queue.Queue[Job], width: int, lanes: Lanes) -> None:
        """Feed one worker from ``todo`` until nothing is left. While at least ``width`` requests (one per
        worker of this run) wait, it keeps ``PIPELINE_DEPTH`` in flight (the runner reads the next while it
        runs the current: no idle round trip); with fewer, one. A worker with nothing left to do steals a
        request still waiting behind a long one on another worker (``Lanes.steal``): the first answer is
        the outcome. So no request waits behind another while a worker of the run is idle (two long
        programs on two slots run side by side)."""
        slot = self._slots.get()
        inflight: collections.deque[tuple[Job, float]] = collections.deque()
        lanes.add(inflight)
        idle_since = time.monotonic()  # when the worker finished its last answer: the next may start
        try:
            while not self._closed:
                while len(inflight) < (PIPELINE_DEPTH if todo.qsize() >= width else 1) and (
                        slot[0] is None or slot[0].sent < self.cfg.recycle_after):  # fmt: skip
                    try:
                        job = todo.get_nowait()
                    except queue.Empty:
                        job = None if inflight else lanes.steal(inflight, todo, lambda: self._closed)
                        if job is None:
                            break
                    if job.done:
                        continue
                    if inflight and len(job.line()) > PIPELINE_MAX_BYTES:
                        todo.put(job)  # sent once the worker is free (see PIPELINE_MAX_BYTES)
                        break
                    try:
                        self._ensure(slot)
                        job.start = job.start or time.monotonic()
                        slot[0].send(job.request, job.line())
                    except SandboxError as e:
                        if inflight:  # the worker died under an earlier job: the read below tells
                            todo.put(job)
                            break
                        self._discard(slot)
                        self._failed(job, todo, f"{e}", slot, ran=False)  # no worker, or it was dead: nothing ran
                        continue
                    inflight.append((job, time.monotonic()))
                if not inflight:
                    if slot[0] is not None and slot[0].sent >= self.cfg.recycle_after:
                        self._discard(slot)
                        continue
                    return
                job, sent = inflight[0]  # stays in the lane while it runs: others may steal what waits behind it
                limit = self.request_timeout(job.request)
                begun = max(sent, idle_since)
                response = None  # the last answer (megabytes of output) is not held while the next is read
                try:  # a host late to read (busy judging the last answer) still gives the answer its margin
                    response = slot[0].read(job.request, max(begun + limit - time.monotonic(), HOST_MARGIN_S))
                except WorkerHung:  # stopped or hung: the host's wall limit ends it, the candidate's verdict
                    inflight.popleft()
                    self._discard(slot, hung=True)
                    self._requeue(inflight, todo)
                    self._finish(job, self._timed_out(job.request, time.monotonic() - begun))
                    idle_since = time.monotonic()
                    continue
                except WorkerDied as e:  # it died running this job; the others had not started
                    inflight.popleft()
                    self._lost(job, todo, inflight, slot, f"{slot[0].name}: {e}", begun)
                    idle_since = time.monotonic()
                    continue
                inflight.popleft()
                idle_since = time.monotonic()
                if response.error is not None:  # the runner exits after a fault
                    self._lost(job, todo, inflight, slot, f"runner fault: {response.error}", begun)
                    continue
                self._finish(job, response.doc())
                if not response.clean:
                    log.info("recycling %s: %s", slot[0].name, response.cleanup)
                    self._requeue(inflight, todo)  # the runner exits after a dirty cleanup
                    self._discard(slot)
        finally:
            lanes.remove(inflight)
            self._replace_later(slot)
            self._slots.put(slot)

    @staticmethod
    def _requeue(inflight: collections.deque[tuple[Job, float]], todo: queue.Queue[Job]) -> None:
        while inflight:
            job = inflight.popleft()[0]
            if not job.done:
                todo.put(job)

    _finishing = threading.Lock()

    @classmethod
    def _finish(cls, job: Job, outcome: dict) -> None:
        """The job's outcome, once: the answer of a stolen job's other copy is dropped."""
        with cls._finishing:
            if job.done:
                return
            job.done = True
        outcome["latency_s"] = time.monotonic() - (job.start or time.monotonic())
        job.outcome = outcome if job.on_outcome is None else job.on_outcome(job.index, outcome)

    def _timed_out(self, request: Request, seconds: float) -> dict:
        """Every test of a request whose runner gave no answer within the host's limit: ``unfinished`` (the
        machine's: frozen, or too busy) where no program can stop its runner (in a container, or a uid of its
        own), else ``timeout`` (backend 'process' as one user: the program may have stopped it)."""
        n = len(request.tests)
        separated = self.cfg.backend == "docker" or os.geteuid() == 0
        result = not_run(Status.UNFINISHED if separated else Status.TIMEOUT, f"no answer from the sandbox within "
                         f"{seconds:.1f} s (the host's wall limit): the runner was stopped or hung, and was replaced",
                         round(seconds / max(n, 1), 4))  # fmt: skip
        return {"id": request.id, "results": [dict(result) for _ in range(n)], "clean": False}

    def _lost(self, job: Job, todo: queue.Queue[Job], inflight: collections.deque[tuple[Job, float]],
              slot: list, error: str, begun: float) -> None:  # fmt: skip
        """The runner died or faulted under ``job`` (started at monotonic ``begun``): the worker is replaced,
        the jobs behind it requeued; if the kernel's OOM killer struck in its container meanwhile (the program
        filled its memory, and the runner or zygote was taken), the program's ``memory_limit``, else a retry."""
        oom = slot[0].oom_killed(time.time() - (time.monotonic() - begun))
        self._discard(slot)
        self._requeue(inflight, todo)
        if oom:
            self._finish(job, self._out_of_memory(job.request, error))
        else:
            self._failed(job, todo, error, slot, ran=True)

    @staticmethod
    def _out_of_memory(request: Request, error: str) -> dict:
        result = not_run(Status.MEMORY_LIMIT, f"the container ran out of memory and its runner was killed ({error})")
        return {"id": request.id, "results": [dict(result) for _ in request.tests], "clean": False}

    def _failed(self, job: Job, todo: queue.Queue[Job], error: str, slot: list, ran: bool) -> None:
        """A bounded retry on a fresh worker; then whose failure it was: if the program ran each time and
        a known-good control program passes on a fresh worker, the program's (``runner_killed``)."""
        if job.done:  # a stolen job's other copy answered already
            return
        job.attempts += 1
        job.deaths += ran
        job.errors.append(error)
        if job.attempts <= self.cfg.retries:
            todo.put(job)
        elif job.deaths == job.attempts and self._control_passes(slot):
            self._finish(job, {"runner_killed": f"the sandbox failed under this program {job.deaths} times, each "
                               f"on a fresh sandbox, while a control program passed ({error})"})  # fmt: skip
        else:
            self._finish(job, {"sandbox_error": "; ".join(job.errors)[-2000:]})

    def control_request(self) -> Request:
        """A known-good program (it echoes its input) under this pool's limits."""
        return Request("bonforge-control", "stdio", [{"input": CONTROL_INPUT}], program="print(input())\n",
                       **self.cfg.limits().fields())

    def _control_passes(self, slot: list) -> bool:
        """Run the control program on a fresh worker in ``slot`` (kept when it stays sound)."""
        request = self.control_request()
        try:
            self._discard(slot)
            self._ensure(slot)
            slot[0].send(request)
            response = slot[0].read(request, self.request_timeout(request))
        except SandboxError as e:
            log.warning("control program failed: %s", e)
            self._discard(slot)
            return False
        passed = bool(response.results) and (response.results[0].status, response.results[0].stdout) == (
            Status.OK, CONTROL_INPUT)
        if not (passed and response.clean):
            self._discard(slot)
        return passed

    def touch(self) -> None:
        """Count the pool as used now (it is about to be: the idle close leaves it alone a while)."""
        with self._lock:
            self._used = time.monotonic()

    def close_if_idle(self, idle_s: float) -> bool:
        """Close the pool when no run is in progress and none ended in the last ``idle_s`` seconds."""
        with self._lock:
            if self._closed or self._busy or time.monotonic() - self._used < idle_s:
                return False
            self._closed = True
        self._stop_workers()
        return True

    def close(self) -> None:
        """Stop every worker and remove its container."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop_workers()

    def _stop_workers(self) -> None:
        for slot in list(self._slots.queue):  # a replacement still starting removes its own container
            if slot[1] is not None:
                try:
                    slot[1].result()
                except Exception:  # it failed to start: nothing of it to remove
                    pass
        with self._lock:
            workers, self._workers = list(self._workers), set()
        try:  # in parallel: each removal waits for the engine
            with ThreadPoolExecutor(max(1, min(len(workers), 16))) as ex:
                list(ex.map(lambda w: w.kill(), workers))
        except RuntimeError:  # at interpreter exit no new futures are allowed: one after another
            for worker in workers:
                worker.kill()
        _live_pools.discard(self)


_shared: dict[str, SandboxPool] = {}
_shared_lock = threading.Lock()
_closer: threading.Thread | None = None  # closes idle shared pools; runs while there are any


def shared_pool(cfg: CodeVerifyConfig) -> SandboxPool:
    """This process's pool for ``cfg``: started on first use, reused (e.g. across a stage's shards or a
    trainer's reward calls), its workers stopped after ``cfg.idle_close_s`` without a request (the next call
    starts a new pool) and at interpreter exit. Call it for each batch rather than keeping the pool."""
    global _closer
    key = cfg.model_dump_json()
    with _shared_lock:
        pool = _shared.get(key)
        if pool is None or pool._closed:
            pool = _shared[key] = SandboxPool(cfg)
        pool.touch()
        if _closer is None:
            _closer = threading.Thread(target=_close_idle_pools, name="bonforge-sandbox-idle", daemon=True)
            _closer.start()
    return pool


def close_shared_pools() -> None:
    """Stop this process's pools (``shared_pool``) now, with their containers: a build's end (the next call
    starts a new pool)."""
    with _shared_lock:
        pools = list(_shared.values())
    for pool in pools:
        pool.close()


def _close_idle_pools() -> None:
    global _closer
    while True:
        with _shared_lock:
            for key in [k for k, p in _shared.items() if p._closed]:
                del _shared[key]
            if not _shared:
                _closer = None
                return
            pools = list(_shared.values())
        time.sleep(min(5.0, max(0.1, min(p.cfg.idle_close_s for p in pools) / 4)))
        for pool in pools:
            if pool.close_if_idle(pool.cfg.idle_close_s):
                log.info("sandbox pool idle for %.0f s: its workers are stopped", pool.cfg.idle_close_s)
