"""The host judges outcomes as they arrive and keeps only what a verdict needs: a batch of programs that
each print the output limit does not hold every output at once, in the stage and in the code reward, for
stdio and assert-style problems alike (peak RSS measured in a child process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CHILD = r"""
import json, resource, sys
import pyarrow as pa
from bonforge.judging.code import verify_code
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.pool import SandboxPool

image, n = sys.argv[1], int(sys.argv[2])
cfg = CodeVerifyConfig(image=image, pool_size=2, time_limit_s=2.0, memory_mb=256, extraction="raw")
spec = json.dumps({"kind": "stdio", "tests": [{"input": f"{i}\n", "output": "1\n"} for i in range(4)]})
problems = pa.table({"problem_id": ["p"], "question": [""], "tests": [spec]})

def cands(k):
    # each test prints just under the 1 MiB output limit (a wrong answer); programs distinct (none deduplicated)
    texts = [f"import sys\nsys.stdout.write('x' * ((1 << 20) - 64))  # {i}\n" for i in range(k)]
    return pa.table({"candidate_id": [f"c{i}" for i in range(k)], "problem_id": ["p"] * k, "teacher": ["t"] * k,
                     "text": texts})

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

with SandboxPool(cfg) as pool:
    verify_code(problems, cands(2), cfg, pool=pool)  # warm: imports, threads, the first outcomes
    before = peak_mb()
    out = verify_code(problems, cands(n), cfg, pool=pool).to_pylist()
    after = peak_mb()
print(json.dumps({"statuses": sorted({v["status"] for v in out}), "rows": len(out), "raised_mb": after - before}))
"""


def test_a_batch_of_large_outputs_does_not_hold_them_all(sandbox_image):
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", CHILD, sandbox_image, "48"], capture_output=True, text=True,
                          env=env, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["statuses"] == ["wrong_answer"] and got["rows"] == 48
    # 48 responses x 4 tests x 1 MiB held until the batch was judged raised the peak by 353 MiB before this
    assert got["raised_mb"] < 100, got


REWARD_CHILD = r"""
import json, resource, sys
from bonforge.rewards.code import score_batch

image, kind = sys.argv[1], sys.argv[2]
# each response answers 4 tests (4 calls of an assert-style check) with 1 MiB each: wrong, distinct programs
if kind == "assert":
    spec = {"kind": "assert", "entry_point": "f",
            "check": "def check(c):\n    for i in range(4):\n        assert c(i) == 'x'\ncheck(f)\n"}
    body = "def f(i):\n    return 'y' * ((1 << 20) - 64)\n"
else:
    spec = {"kind": "stdio", "tests": [{"input": f"{i}\n", "output": "1\n"} for i in range(4)]}
    body = "import sys\nsys.stdout.write('x' * ((1 << 20) - 64))\n"
info = {"problem_id": "p", "question": "", "verify": json.dumps({"image": image, "time_limit_s": 2.0,
                                                                 "output_limit_bytes": 8 << 20})}

def batch(k, tag):
    texts = [f"```python\n# {tag} {i}\n{body}```" for i in range(k)]
    return score_batch(texts, [json.dumps(spec)] * k, [info] * k, pool_size=2)

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

batch(2, "warm")  # imports, the pool's and the checker's start, the first outcomes
warm = peak_mb()
small = batch(8, "small")
after_small = peak_mb()
large = batch(48, "large")
after_large = peak_mb()
print(json.dumps({"statuses": sorted({r["status"] for r in small + large}), "rows": len(large),
                  "small_mb": after_small - warm, "large_mb": after_large - warm}))
"""


@pytest.mark.parametrize("kind", ["assert", "stdio"])
def test_a_reward_batch_holds_no_more_for_more_responses(sandbox_image, kind):
    """The code reward's extra host memory is bounded by the pool (``judging.code.HOST_ANSWERS_PER_WORKER``
    answers per worker), not by the batch: 48 responses raise the peak no more than 8 do. An assert-style
    run's answers are replayed by its check as they arrive, then dropped."""
    from bonforge.judging.code import HOST_ANSWERS_PER_WORKER

    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", REWARD_CHILD, sandbox_image, kind], capture_output=True, text=True,
                          env=env, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["statuses"] == ["wrong_answer"] and got["rows"] == 48
    answer_mb = 4 * 1  # one response's answer: 4 tests x 1 MiB
    # before: the assert-style batch of 48 raised the peak by 210 MiB, 8 by 52 MiB (call lines held per chunk)
    assert got["large_mb"] < HOST_ANSWERS_PER_WORKER * 2 * answer_mb + 16, got
    assert got["large_mb"] - got["small_mb"] < 16, got


# A test's memory limit holds for the whole test: every process it starts, the files it writes in memory, a
# JVM's off-heap memory and a child JVM (a memory cgroup per test, where the engine allows one), at a 64 MiB limit.
CPP_CHILDREN = r"""#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <sys/wait.h>
int main() {
  for (int i = 0; i < 5; i++)
    if (fork() == 0) {
      volatile char *p = (volatile char *)malloc(MB << 20);
      for (long j = 0; j < (MB << 20); j += 4096) p[j] = 1;
      sleep(1);
      _exit(p[4096] - 1);
    }
  int bad = 0, st;
  for (int i = 0; i < 5; i++) { wait(&st); bad |= !WIFEXITED(st) || WEXITSTATUS(st); }
  if (bad) return 3;
  puts("5");
}
"""
CPP_MEMFDS = r"""#include <cstdio>
#include <vector>
#include <sys/mman.h>
#include <unistd.h>
int main() {
  std::vector<char> b(1 << 20, 1);
  long w = 0;
  for (int k = 0; k < FILES; k++) {  // each under the 16 MiB file-size limit, together over the memory limit
    int fd = memfd_create("x", 0);
    for (int i = 0; i < 15; i++) w += write(fd, b.data(), b.size());
  }
  if (w != FILES * 15L << 20) return 3;
  puts("5");
}
"""
CPP_SHM = r"""#include <cstdio>
#include <vector>
static char heap[40 << 20];
int main() {
  std::vector<char> b(1 << 20, 1);
  long w = 0;
  for (int k = 0; k < FILES; k++) {
    char name[32];
    snprintf(name, sizeof name, "/dev/shm/f%d", k);
    FILE *f = fopen(name, "w");
    for (int i = 0; i < 15; i++) w += fwrite(b.data(), 1, b.size(), f);
    fclose(f);
  }
  for (int i = 0; i < (40 << 20); i += 4096) heap[i] = 1;  // 40 MiB of its own beside the files
  if (w != FILES * 15L << 20 || !heap[4096]) return 3;
  puts("5");
}
"""
JAVA_OFF_HEAP = """import java.nio.ByteBuffer;
public class Main { public static void main(String[] a) {
  ByteBuffer[] b = new ByteBuffer[MB];
  for (int i = 0; i < MB; i++) {
    b[i] = ByteBuffer.allocateDirect(1 << 20);
    for (int j = 0; j < 1 << 20; j += 4096) b[i].put(j, (byte) 1);
  }
  System.out.println(5);
} }
"""
JAVA_CHILD = """public class Main { public static void main(String[] a) throws Exception {
  int rc = new ProcessBuilder("java", "-Xmx512m", "-cp", ".", "Hog").inheritIO().start().waitFor();
  System.out.println(rc == 0 ? 5 : rc);
} }
class Hog { public static void main(String[] a) {
  byte[][] b = new byte[MB][];
  for (int i = 0; i < MB; i++) { b[i] = new byte[1 << 20]; for (int j = 0; j < 1 << 20; j += 4096) b[i][j] = 1; }
} }
"""
CPP_MALLOC_LOOP = "#include <cstdlib>\n#include <cstring>\nint main() { for (;;) memset(malloc(1 << 20), 1, 1 << 20); }"
PY_ALLOC = "x = bytearray(MB << 20)\nfor i in range(0, len(x), 4096):\n    x[i] = 1\nprint(5)\n"


def _memory_request(language, program, name, **values):
    from bonforge.judging.code import build_request
    from bonforge.judging.spec import parse_spec
    from bonforge.sandbox.config import CodeVerifyConfig

    for key, value in values.items():
        program = program.replace(key, str(value))
    spec = parse_spec(json.dumps({"kind": "stdio", "memory_mb": 64, "tests": [{"input": "", "output": "5\n"}]}), "p")
    cfg = CodeVerifyConfig(time_limit_s=1.0, memory_mb=256)
    return build_request(spec, program, cfg, name, language=language)


WHOLE_TEST = {  # name: (language, program, values over the limit, values under it)
    "five children of 48 MiB": ("cpp", CPP_CHILDREN, {"MB": 48}, {"MB": 8}),
    "memfd files": ("cpp", CPP_MEMFDS, {"FILES": 6}, {"FILES": 2}),
    "/dev/shm files": ("cpp", CPP_SHM, {"FILES": 3}, {"FILES": 0}),
    "malloc until it fails": ("cpp", CPP_MALLOC_LOOP, {}, None),
    "Java off-heap": ("java", JAVA_OFF_HEAP, {"MB": 200}, {"MB": 4}),
    "a child JVM": ("java", JAVA_CHILD, {"MB": 200}, {"MB": 4}),
    "PyPy": ("pypy", PY_ALLOC, {"MB": 200}, {"MB": 8}),
    "Python": ("python", PY_ALLOC, {"MB": 200}, {"MB": 8}),
}


@pytest.fixture(scope="module")
def one_worker(sandbox_image):
    from bonforge.sandbox.config import CodeVerifyConfig
    from bonforge.sandbox.pool import SandboxPool

    with SandboxPool(CodeVerifyConfig(image=sandbox_image, pool_size=1, time_limit_s=1.0, memory_mb=256)) as pool:
        yield pool


def _results(pool, requests):
    return [(o.get("results") or [{}])[0] for o in pool.run(requests)]


def test_a_memory_limit_holds_for_the_whole_test(one_worker):
    """Over 64 MiB together (children, memory files, off-heap, a child JVM, any language): memory_limit; the
    same programs under it pass (each of them passed a 64 MiB problem before, bound per process only)."""
    over = [_memory_request(lang, prog, name, **big) for name, (lang, prog, big, _) in WHOLE_TEST.items()]
    under = [_memory_request(lang, prog, name, **small) for name, (lang, prog, _, small) in WHOLE_TEST.items()
             if small is not None]  # fmt: skip
    got = _results(one_worker, over + under)
    assert {r["id"]: got[i]["status"] for i, r in enumerate(over)} == dict.fromkeys(WHOLE_TEST, "memory_limit")
    assert [(r["id"], got[len(over) + i]["status"], got[len(over) + i]["stdout"]) for i, r in enumerate(under)] == [
        (r["id"], "ok", "5\n") for r in under]


def test_pypy_runs_right_programs_at_64_mib(one_worker):
    """PyPy could not start under 64 MiB of address space: every PyPy program of such a problem failed."""
    got = _results(one_worker, [_memory_request("pypy", "print(sum(range(5)) // 2)\n", "pypy")])
    assert (got[0]["status"], got[0]["stdout"]) == ("ok", "5\n")


def test_memory_limit_is_never_a_runs_own_claim_when_it_succeeded(one_worker):
    """A run that exits 0 is judged on its output whatever it claims (an out-of-memory message on stderr, or the
    child's own MemoryError line on its result pipe); a failed run with a runtime's out-of-memory report, or one
    the kernel's OOM killer stopped, is memory_limit."""
    got = _results(one_worker, [
        _memory_request("cpp", '#include <cstdio>\nint main() { fputs("std::bad_alloc", stderr); puts("4"); }\n', "a"),
        _memory_request("python", "import os\nos.write(3, b'm\\n')\nprint(4)\n", "b"),
        _memory_request("python", "s = ' ' * (64 * 2**30)\n", "c"),
        _memory_request("cpp", '#include <cstdio>\nint main() { printf("%p", (void *)new char[1L << 46]); }\n', "d"),
    ])  # fmt: skip
    assert [(r["status"], r["stdout"]) for r in got] == [("ok", "4\n"), ("ok", "4\n"), ("memory_limit", ""),
                                                         ("memory_limit", "")]  # fmt: skip


def test_a_tests_memory_files_do_not_count_against_the_next_candidate(one_worker):
    """Files one candidate left in /dev/shm are removed after it and never charged to the next one's test."""
    first = _results(one_worker, [_memory_request("cpp", CPP_SHM.replace("40 << 20", "4 << 20"), "a", FILES=3)])
    second = _results(one_worker, [_memory_request("python", PY_ALLOC, "b", MB=40)])
    assert (first[0]["status"], second[0]["status"]) == ("ok", "ok")


ESCAPE = """import os
tried = []
for root, dirs, files in os.walk('/run/bonforge-memory'):
    for name in ('cgroup.procs', 'tasks', 'memory.limit_in_bytes', 'memory.memsw.limit_in_bytes'):
        if name in files:
            try:
                with open(os.path.join(root, name), 'w') as f:
                    f.write(str(os.getpid()) if 'limit' not in name else str(1 << 40))
                tried.append(name)
            except OSError:
                pass
    try:
        os.mkdir(os.path.join(root, 'mine'))
        tried.append('mkdir')
    except OSError:
        pass
x = bytearray(200 << 20)
for i in range(0, len(x), 4096):
    x[i] = 1
print(5 if not tried else tried)
"""


def test_a_test_cannot_leave_or_raise_its_memory_cgroup(one_worker):
    """The writable cgroup mount is the runner's (root): a test can read it but neither move itself out, raise a
    limit nor make a cgroup; its 200 MiB stay bound."""
    got = _results(one_worker, [_memory_request("python", ESCAPE, "escape")])
    assert got[0]["status"] == "memory_limit", got[0]


@pytest.mark.parametrize("info,offered", [({"CgroupVersion": "1", "CgroupDriver": "cgroupfs"}, True),
                                          ({"CgroupVersion": "2", "CgroupDriver": "systemd"}, False),
                                          ({"CgroupVersion": "1", "CgroupDriver": "systemd"}, False)])
def test_a_container_gets_a_memory_cgroup_mount_only_where_the_engine_allows_one(monkeypatch, caplog, info, offered):
    """cgroup v1 with the cgroupfs driver: the container is made under this process's cgroup, whose memory folder
    the runner gets writable; elsewhere neither, with a warning (tests are then bound per process)."""
    from bonforge.sandbox import container
    from bonforge.sandbox.config import CodeVerifyConfig

    class Api:
        def create_host_config(self, **kw):
            return kw

    class Client:
        api = Api()

        def info(self):
            return info

    monkeypatch.setattr(container.image_mod, "client", lambda: Client())
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    container.cgroup_parent.cache_clear()
    try:
        spec = container.container_spec(CodeVerifyConfig(), "img", "n", "/tmp/sock")
    finally:
        container.cgroup_parent.cache_clear()
    mount = f"/sys/fs/cgroup/memory/bonforge-sbx-{os.getpid()}"
    assert ("--memory-cgroup" in spec["command"]) == offered
    assert (spec["host_config"]["binds"].get(mount) == {"bind": "/run/bonforge-memory", "mode": "rw"}) == offered
    assert (spec["host_config"]["cgroup_parent"] == f"/bonforge-sbx-{os.getpid()}") == offered
    assert ("no memory cgroup per test" in caplog.text) == (not offered)


DAEMON = """import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        x = bytearray(MB << 20)
        for i in range(0, len(x), 4096):
            x[i] = 1
        time.sleep(60)
    os._exit(0)
time.sleep(0.5)
print(5)
"""
SYSV_SHM = """import ctypes
libc = ctypes.CDLL(None)
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget(0, MB << 20, 0o1600)
ctypes.memset(libc.shmat(shmid, None, 0), 1, MB << 20)
print(5)
"""
NORESERVE = """import mmap
m = mmap.mmap(-1, MB << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000)  # MAP_NORESERVE
for i in range(0, MB << 20, 4096):
    m[i] = 1
print(5)
"""


def test_memory_a_test_leaves_behind_is_never_charged_to_the_next(one_worker):
    """Attacks: a daemon (double fork, a session of its own) holding 40 MiB past its test, a System V segment of
    40 MiB left attached to nothing, and memory mapped without reserve (200 MiB, over the limit). The daemon's
    and the segment's candidates are judged on their output, the unreserved mapping is memory_limit, and each
    next candidate's 40 MiB pass at 64 MiB (control)."""
    programs = [("daemon", DAEMON, 40), ("after-daemon", PY_ALLOC, 40), ("sysv", SYSV_SHM, 40),
                ("after-sysv", PY_ALLOC, 40), ("noreserve", NORESERVE, 200), ("after-noreserve", PY_ALLOC, 40)]
    got = _results(one_worker, [_memory_request("python", prog, name, MB=mb) for name, prog, mb in programs])
    assert [r["status"] for r in got] == ["ok", "ok", "ok", "ok", "memory_limit", "ok"], got
