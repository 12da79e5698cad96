"""What the runner's supervisor asks of the kernel: prctl, the container cgroup's counters, process trees,
the state a zygote's children inherit, and emptying scratch folders. Standard library only (in the image
beside ``runner.py``)."""

import ctypes
import functools
import os
import resource
import selectors

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
def libc():
    return ctypes.CDLL(None, use_errno=True)


def prctl(option, value):
    try:
        return libc().prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def counter_file(paths):
    for path in paths:
        try:
            return os.open(path, os.O_RDONLY)
        except OSError:
            continue
    return None


@functools.cache
def oom_file():
    """The cgroup's OOM event file, opened once (cgroup files are re-read with pread); else None."""
    return counter_file(("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"))


@functools.cache
def cpu_file():
    """The container cgroup's CPU counter (v2 ``cpu.stat``, v1 ``cpuacct.usage``); else None."""
    return counter_file(("/sys/fs/cgroup/cpu.stat", "/sys/fs/cgroup/cpuacct/cpuacct.usage",
                          "/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage"))  # fmt: skip


def oom_kills():
    try:
        for line in os.pread(oom_file(), 4096, 0).splitlines():
            if line.startswith(b"oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError, TypeError):
        pass
    return 0


def cgroup_cpu():
    """CPU seconds used by every process of this cgroup so far, or None (no cgroup of our own)."""
    try:
        data = os.pread(cpu_file(), 4096, 0)
    except (OSError, TypeError):
        return None
    if data.startswith(b"usage_usec "):
        return int(data.split()[1]) / 1e6
    return int(data) / 1e9 if data.strip().isdigit() else None


class TestCgroup:
    """A memory cgroup per test (cgroup v1), made under the container's own in a writable mount of its parent that
    the host provides (``--memory-cgroup``): everything a test's processes charge (their memory, the files they
    write in tmpfs and memfds, a JVM's off-heap memory, every child) counts against the test's limit, and the
    kernel enforces it whatever the supervisor does. ``None`` from ``find`` when the mount does not hold the
    container's cgroup (then the tests get RLIMIT_AS only)."""

    NAME = "test"

    def __init__(self, home):
        self.home, self.path = home, os.path.join(home, self.NAME)

    @classmethod
    def find(cls, mount):
        try:
            with open("/proc/self/cgroup") as f:
                own = next(ln.split(":", 2)[2].strip() for ln in f if ln.split(":", 2)[1] == "memory")
            home = os.path.join(mount, os.path.basename(own))
            with open(os.path.join(home, "cgroup.procs")) as f:
                if str(os.getpid()) not in f.read().split():
                    return None
        except (OSError, StopIteration, IndexError):
            return None
        return cls(home)

    def enter(self, memory_mb):
        """Make the test's cgroup with its limit; the fd of its ``cgroup.procs`` (the test's child writes "0" there
        to join it, while still root)."""
        os.mkdir(self.path, 0o700)
        for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):  # no swap beyond it either
            try:
                _write(os.path.join(self.path, name), b"%d" % (int(memory_mb) << 20))
            except FileNotFoundError:  # no swap accounting in this kernel
                pass
        return os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)

    def leave(self):
        """Whether the kernel's OOM killer struck in the test; the cgroup removed (every process of the test is
        gone by now)."""
        try:
            with open(os.path.join(self.path, "memory.oom_control"), "rb") as f:
                return any(ln.startswith(b"oom_kill ") and int(ln.split()[1]) > 0 for ln in f)
        finally:
            os.rmdir(self.path)


def _write(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def set_oom_score_adj(value):
    """Whether ``/proc/self/oom_score_adj`` now holds ``value`` (below the floor it needs CAP_SYS_RESOURCE)."""
    try:
        _write("/proc/self/oom_score_adj", b"%d" % value)
        return True
    except OSError:
        return False


def self_cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def scheduling(pid, tid=None):
    """How the scheduler treats a task (``tid`` of ``pid``, or its main thread): its nice value and policy
    (``/proc/.../stat``), CPU affinity and its session's autogroup nice; None once it is gone."""
    tid = tid or pid
    try:
        with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        try:
            with open(f"/proc/{pid}/autogroup", "rb") as f:
                group = f.read().split()[-1]
        except OSError:  # no autogroups in this kernel
            group = b""
        return int(fields[16]), int(fields[38]), frozenset(os.sched_getaffinity(tid)), group
    except (OSError, ValueError, IndexError):
        return None


def cpu_wait(pids, given):
    """The longest time, in seconds, that any thread of ``pids`` has waited for a CPU while runnable (the
    scheduler's run-queue delay, ``/proc/<pid>/task/<tid>/schedstat``; a CPU quota's throttling included):
    the share of a test's wall time that the machine took, not the program. 0 where the kernel keeps no
    such count, and as soon as a thread no longer has the scheduling it was ``given`` (``scheduling``: a
    program that lowers its own priority or narrows its CPUs makes its own waits)."""
    longest = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            if scheduling(pid, int(tid)) not in (given, None):
                return 0.0
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    longest = max(longest, int(f.read().split()[1]))
            except (OSError, ValueError, IndexError):
                continue
    return longest / 1e9


@functools.cache
def selector():
    """One epoll instance for the runner's life."""
    return selectors.DefaultSelector()


def descendants(root):
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


def fingerprint(pid):
    """The state of ``pid`` its forked children inherit: rlimits, CPU affinity, priority."""
    try:
        return ([resource.prlimit(pid, r) for r in WATCHED_LIMITS], os.sched_getaffinity(pid),
                os.getpriority(os.PRIO_PROCESS, pid))  # fmt: skip
    except OSError as e:
        return repr(e)


class as_uid:
    """Run file operations as the sandbox uid (its files, nothing else); no-op without uid separation."""

    def __init__(self, ids):
        self.uid = ids[0] if ids else None

    def __enter__(self):
        if self.uid is not None:
            os.seteuid(self.uid)

    def __exit__(self, *exc):
        if self.uid is not None:
            os.seteuid(0)


def empty_dir(root, budget=100_000):
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


def listdir(path):
    try:
        return os.listdir(path)
    except OSError:
        return []


def mtime(path):
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def private_scratch(size_mb):
    """Backend process as root, in mount and IPC namespaces of its own: fresh file systems over the host's
    shared scratch folders, so a program never reaches the host's (Ray's world-writable session folders
    under /tmp included)."""
    for path in HOST_SCRATCH_DIRS:
        if os.path.isdir(path):
            kind = b"mqueue" if path == "/dev/mqueue" else b"tmpfs"
            opts = None if kind == b"mqueue" else f"size={size_mb}m,mode=1777".encode()
            if libc().mount(kind, path.encode(), kind, 2 | 4, opts) != 0:  # MS_NOSUID | MS_NODEV
                raise OSError(ctypes.get_errno(), f"cannot mount a private {path}")


def remove_owned(path, uid, keep):
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
                empty_dir(entry.path)
                os.rmdir(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            pass
