"""Start-up of one runner container through the Docker SDK: its definition (``container_spec``, and the
same as a ``docker run`` command line), create, label, attach and start (``start_container``), the socket
folder it connects back through, and the runner's side of the channel (``ContainerRunner``)."""

from __future__ import annotations

import functools
import glob
import logging
import os
import select
import shutil
import struct
import tempfile
import threading
import time

from bonforge.errors import SandboxError
from bonforge.runtime.processes import pid_alive
from bonforge.sandbox import image as image_mod
from bonforge.sandbox.config import CodeVerifyConfig

log = logging.getLogger("bonforge.sandbox")

SANDBOX_IDS = "65534:65534"  # the uid:gid tests run under in a container (the runner stays root)
_RUNNER_HEADROOM_MB = 256  # container memory above the per-test limit: runner, tmpfs, page cache
SOCKET_NAME = "runner.sock"
SOCKET_DIR_PREFIX = "bonforge-sbx-"  # + the owning process's pid: a folder per worker in the temp folder
SOCKET_DIR_IN_CONTAINER = "/run/bonforge"
RUNNER_UID = 0  # the uid the runner connects to the host's socket as (root in its container; tests are 65534)
OOM_EVENT_WAIT_S = 0.5  # how long a dead container's OOM event may take to reach the engine's event log
# Per-test memory cgroups (cgroup v1, the engine's cgroupfs driver): this process's containers are made under a
# cgroup of its own, whose memory folder is mounted writable into each, so that the runner can make a cgroup per
# test inside its container's (``oskit.TestCgroup``). Only the runner (root) can write there; tests cannot.
CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_PARENT_PREFIX = "bonforge-sbx-"  # + the owning process's pid
MEMORY_CGROUP_IN_CONTAINER = "/run/bonforge-memory"


class _Frames:
    """Docker's multiplexed attach stream (no TTY): 8-byte headers (stream, size) before each chunk."""

    def __init__(self):
        self._pending = bytearray()

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        """(stdout, stderr) bytes complete in what has arrived so far."""
        self._pending += data
        out, err = bytearray(), bytearray()
        while len(self._pending) >= 8:
            stream, size = self._pending[0], struct.unpack(">I", self._pending[4:8])[0]
            if len(self._pending) < 8 + size:
                break
            (err if stream == 2 else out).extend(self._pending[8 : 8 + size])
            del self._pending[: 8 + size]
        return bytes(out), bytes(err)


class ContainerRunner:
    """The runner in a container started through the Docker SDK. With ``attach`` the channel is the
    container's attached stdin/stdout (frames demultiplexed); else the runner connects to the host's socket
    and only stderr is attached (for the runner's own failure messages)."""

    def __init__(self, spec: dict, name: str, attach: bool):
        self.name, self.demux = name, attach
        self._frames, self._err, self._eof = _Frames(), bytearray(), False
        api = image_mod.client().api
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1} if attach else {"stderr": 1, "stream": 1}
        self.id = None
        try:
            self.id = api.create_container(**spec)["Id"]
            self._attached = api.attach_socket(self.id, params=params)
            self._sock = getattr(self._attached, "_sock", self._attached)  # a real socket, read without buffering
            api.start(self.id)
        except image_mod.engine_errors() as e:
            if self.id is not None:
                image_mod.remove(self.id)
            raise image_mod.engine_error(f"starting sandbox worker {name}", e) from None
        self.fd = self._sock.fileno()

    def write(self, data: bytes) -> None:
        self._sock.sendall(data)

    def read(self) -> bytes:
        """What the runner wrote on stdout since the last read (stderr kept aside); b"" at the end."""
        while True:
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return b""
            out, err = self._frames.feed(chunk)
            self._keep_err(err)
            if out:
                return out

    def _keep_err(self, err: bytes) -> None:
        self._err += err
        del self._err[:-4000]

    def exit_code(self) -> int | None:
        """The container's exit code once it stopped (-1 once it is gone), else None."""
        try:
            state = image_mod.client().api.inspect_container(self.id)["State"]
        except image_mod.sdk().errors.NotFound:
            return -1
        except image_mod.engine_errors():
            return None
        return None if state.get("Running") or state.get("Status") == "created" else state.get("ExitCode", -1)

    def ended(self) -> bool:
        """Whether the attached stderr stream ended (the container exited); what it holds is kept. Only
        for the socket transport (with ``attach`` the stream is the channel)."""
        try:
            while not self._eof and select.select([self.fd], [], [], 0)[0]:
                chunk = os.read(self.fd, 65536)
                self._eof = not chunk
                self._keep_err(self._frames.feed(chunk)[1])
        except OSError:
            self._eof = True
        return self._eof

    def stderr(self) -> str:
        if not self.demux:
            self.ended()
        return bytes(self._err).decode(errors="replace").strip()

    def oom_killed(self, since: float) -> bool:
        """Whether the kernel's OOM killer struck in this container since ``since`` (a Unix time): its
        cgroup's event, whichever of its processes was killed (the engine may report it a moment after)."""
        api, deadline = image_mod.client().api, time.monotonic() + OOM_EVENT_WAIT_S
        while True:
            try:
                events = list(api.events(since=since - 1, until=time.time(), decode=True,
                                         filters={"container": self.id, "event": "oom"}))  # fmt: skip
            except image_mod.engine_errors():
                return False
            if events or time.monotonic() > deadline:
                return bool(events)
            time.sleep(0.05)

    def stop(self, grace: float) -> None:
        """Remove the container at once (the runner holds nothing worth a graceful end)."""
        image_mod.remove(self.id)
        try:
            self._sock.close()
        except OSError:
            pass


def container_spec(cfg: CodeVerifyConfig, image: str, name: str, socket_dir: str | None = None,
                   sys_resource: bool = True) -> dict:  # fmt: skip
    """The Docker engine's ``create_container`` arguments of one sandbox worker; with ``socket_dir`` the
    runner connects to the host's socket there (mounted read-only at ``/run/bonforge``) instead of using
    its attached stdin/stdout."""
    api = image_mod.client().api
    mem = f"{cfg.memory_mb + cfg.tmpfs_mb + _RUNNER_HEADROOM_MB}m"
    connect = ["--connect", f"{SOCKET_DIR_IN_CONTAINER}/{SOCKET_NAME}"] if socket_dir else []
    binds = {socket_dir: {"bind": SOCKET_DIR_IN_CONTAINER, "mode": "ro"}} if socket_dir else {}
    parent = cgroup_parent()
    if parent:  # the daemon makes the memory folder (a bind's missing source) and the container's cgroup in it
        binds[f"{CGROUP_ROOT}/memory/{parent}"] = {"bind": MEMORY_CGROUP_IN_CONTAINER, "mode": "rw"}
        connect += ["--memory-cgroup", MEMORY_CGROUP_IN_CONTAINER]
    # The runner is root with only what it needs to start tests as another uid and kill them, and to keep
    # the OOM killer off itself where the engine grants it (SYS_RESOURCE: oom_score_adj -1000 for itself, a
    # floor of 1000 for tests); each test drops to SANDBOX_IDS and loses every capability before it runs.
    caps = ["SETUID", "SETGID", "KILL", *(["SYS_RESOURCE"] if sys_resource else [])]
    host_config = api.create_host_config(
        binds=binds or None, cgroup_parent=f"/{parent}" if parent else None, auto_remove=True, init=True,
        network_mode="none", read_only=True,
        tmpfs={"/tmp": f"rw,exec,nosuid,nodev,size={cfg.tmpfs_mb}m,mode=1777"}, mem_limit=mem, memswap_limit=mem,
        pids_limit=cfg.pids_limit, nano_cpus=round(cfg.cpus_per_container * 1e9), ipc_mode="private",
        cap_drop=["ALL"], cap_add=caps, security_opt=["no-new-privileges"], log_config={"type": "none"},
    )  # fmt: skip
    return {
        "image": image, "name": name, "host_config": host_config, "user": "0:0", "working_dir": "/tmp",
        "command": ["python3", "-u", image_mod.RUNNER_IN_IMAGE, "--contained", "--uid", SANDBOX_IDS, *connect],
        "labels": image_mod.labels(),
        # The runner's symbols bound at start, not in each forked test (each lazy binding copies a page).
        "environment": {"HOME": "/tmp", "LD_BIND_NOW": "1"},
        "stdin_open": not socket_dir, "use_config_proxy": False,
    }  # fmt: skip


def docker_argv(cfg: CodeVerifyConfig, image: str, name: str, socket_dir: str | None = None) -> list[str]:
    """The ``docker run`` command line of the same container as ``container_spec`` (for comparisons with a
    container per candidate, and to reproduce a sandbox by hand): stdin attached, or the socket folder."""
    spec = container_spec(cfg, image, name, socket_dir, sys_resource=_sys_resource_refused is False)  # if granted
    hc = spec["host_config"]
    mount = ["--volume", f"{socket_dir}:{SOCKET_DIR_IN_CONTAINER}:ro"] if socket_dir else ["-i"]
    argv = ["docker", "run", *mount, "--rm", "--init", "--name", name, "--network", "none", "--read-only"]
    argv += [a for k, v in spec["labels"].items() for a in ("--label", f"{k}={v}")]
    argv += [a for k, v in hc["Tmpfs"].items() for a in ("--tmpfs", f"{k}:{v}")]
    argv += [a for b in hc.get("Binds") or () if not b.startswith(f"{socket_dir}:") for a in ("--volume", b)]
    argv += ["--cgroup-parent", hc["CgroupParent"]] if hc.get("CgroupParent") else []
    argv += ["--memory", str(hc["Memory"]), "--memory-swap", str(hc["MemorySwap"]), "--pids-limit",
             str(hc["PidsLimit"]), "--cpus", str(hc["NanoCpus"] / 1e9), "--ipc", "private"]  # fmt: skip
    argv += ["--user", spec["user"]]
    argv += ["--cap-drop", "ALL", *[a for c in hc["CapAdd"] for a in ("--cap-add", c)]]
    argv += [*[a for o in hc["SecurityOpt"] for a in ("--security-opt", o)], "--workdir", spec["working_dir"]]
    argv += [a for k, v in spec["environment"].items() for a in ("--env", f"{k}={v}")]
    return [*argv, "--log-driver", "none", image, *spec["command"]]


@functools.cache
def cgroup_parent() -> str | None:
    """The cgroup this process's sandbox containers are made under (a name at the root of each hierarchy) where
    the engine makes per-test memory cgroups possible: on this host, cgroup v1, its cgroupfs driver; else None
    (then tests are bound by RLIMIT_AS per process and the container's cgroup). Leftovers of dead processes are
    removed first."""
    if remote_daemon():
        return None
    try:
        info = image_mod.client().info()
    except image_mod.engine_errors():
        return None
    if str(info.get("CgroupVersion")) != "1" or info.get("CgroupDriver") != "cgroupfs":
        log.warning("sandbox: no memory cgroup per test (needs cgroup v1 and the cgroupfs driver; the engine has "
                    "cgroup v%s, %s): a test's memory is bound per process (RLIMIT_AS)",
                    info.get("CgroupVersion"), info.get("CgroupDriver"))  # fmt: skip
        return None
    for path in glob.glob(f"{CGROUP_ROOT}/*/{CGROUP_PARENT_PREFIX}*"):
        owner = os.path.basename(path)[len(CGROUP_PARENT_PREFIX) :]
        if owner.isdigit() and not pid_alive(int(owner)):
            try:
                os.rmdir(path)  # empty once its containers are gone (else it stays for a later sweep)
            except OSError:
                pass
    return f"{CGROUP_PARENT_PREFIX}{os.getpid()}"


def remove_dead_socket_dirs() -> None:
    """Socket folders of pools whose process is gone (killed before it could remove them)."""
    for path in glob.glob(os.path.join(tempfile.gettempdir(), f"{SOCKET_DIR_PREFIX}*-*")):
        owner = os.path.basename(path)[len(SOCKET_DIR_PREFIX) :].split("-")[0]
        if owner.isdigit() and not pid_alive(int(owner)):
            shutil.rmtree(path, ignore_errors=True)


def give_to_runner(path: str) -> None:
    """Hand a path of the socket folder to the runner's uid (mode 0700 / 0600: no other user reaches it).
    Not running as root, the folder stays ours and is opened for traversal only (0711)."""
    try:
        os.chown(path, RUNNER_UID, RUNNER_UID)
    except PermissionError:
        os.chmod(path, 0o711 if os.path.isdir(path) else 0o666)


def is_runner(pid: int, uid: int, runner) -> bool:
    """Whether the process ``pid`` (from the kernel's peer credentials) is the container's runner: the
    runner's uid, and a member of that container's cgroup."""
    if uid != RUNNER_UID or pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            return runner.id in f.read()
    except OSError:
        return False


def socket_folder(cfg: CodeVerifyConfig) -> str | None:
    """A new folder (0700, the runner's) for one runner's socket to the host, or None where the daemon is
    remote and cannot mount it (the runner then speaks over its attached stdin/stdout)."""
    if remote_daemon():
        return None
    path = tempfile.mkdtemp(prefix=f"{SOCKET_DIR_PREFIX}{os.getpid()}-")
    give_to_runner(path)
    return path


def remote_daemon() -> bool:
    """Whether DOCKER_HOST names a daemon on another machine (it cannot mount this host's socket folder)."""
    return os.environ.get("DOCKER_HOST", "").startswith(("tcp://", "ssh://", "http://", "https://"))


_sys_resource_refused: bool | None = None  # whether the engine refuses containers CAP_SYS_RESOURCE (None: not known)
_sys_resource_lock = threading.Lock()


def start_container(cfg: CodeVerifyConfig, image: str, name: str, socket_dir: str | None) -> ContainerRunner:
    """A sandbox container, with CAP_SYS_RESOURCE unless the engine refuses it (its own process may lack it:
    then the runner stays killable by the OOM killer, and a death it causes is judged by the OOM event).
    One container of the process finds out; those started meanwhile go without it (no waiting)."""
    global _sys_resource_refused
    attach = socket_dir is None
    if _sys_resource_refused is None and _sys_resource_lock.acquire(blocking=False):
        try:
            if _sys_resource_refused is None:
                try:
                    runner = ContainerRunner(container_spec(cfg, image, name, socket_dir), name, attach)
                except SandboxError as e:  # the same container without it: if that starts, the cap was refused
                    runner = ContainerRunner(container_spec(cfg, image, name, socket_dir, sys_resource=False), name,
                                              attach)  # fmt: skip
                    log.info("sandbox: the Docker engine refuses CAP_SYS_RESOURCE; an OOM kill of a runner is "
                             "judged from the engine's oom event")  # fmt: skip
                    log.debug("the engine's refusal: %s", e)
                    _sys_resource_refused = True
                else:
                    _sys_resource_refused = False
                return runner
        finally:
            _sys_resource_lock.release()
    sys_resource = _sys_resource_refused is False
    return ContainerRunner(container_spec(cfg, image, name, socket_dir, sys_resource=sys_resource), name, attach)


