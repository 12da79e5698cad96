"""Assert-style checks are the dataset's code: they run in a container of their own, never on the host.

Hostile checks (and a hostile HumanEval prompt, the check's context) try to write a host file, read one and
leak it, reach a socket, kill a host process and fork-bomb: nothing reaches the host, each gets a clean
verdict of its own problem, and a benign problem judged in the same batch is judged right. A program that
raises StopIteration never ends a check's iteration (through the real sandbox).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess

import pyarrow as pa
import pytest

from bonforge.judging.code import verify_code
from bonforge.schema import CANDIDATES, PROBLEMS

RIGHT = "def f(x):\n    return x + 1\n"


def check_spec(check: str, context: str = "") -> str:
    return json.dumps({"kind": "assert", "entry_point": "f", "check": check, "context": context})


def judge_problems(pool, problems: dict[str, str], programs: list[str]) -> dict[str, list[dict]]:
    """Verdicts of each program on each problem (problem id -> spec JSON), in one batch."""
    cfg = pool.cfg.model_copy(update={"extraction": "raw"})
    rows = [{"problem_id": pid, "source": "t", "domain": "code", "question": "", "tests": spec}
            for pid, spec in problems.items()]  # fmt: skip
    cands = [{"candidate_id": f"{pid}/{i}", "problem_id": pid, "teacher": "t", "sample_index": i, "text": p}
             for pid in problems for i, p in enumerate(programs)]  # fmt: skip
    out = verify_code(pa.Table.from_pylist(rows, schema=PROBLEMS), pa.Table.from_pylist(cands, schema=CANDIDATES),
                      cfg, pool=pool).to_pylist()  # fmt: skip
    return {pid: [v for v in out if v["problem_id"] == pid] for pid in problems}


def test_the_check_runs_in_a_container_of_its_own(docker_pool):
    # uid 65534, no network interface but loopback, a read-only root holding the sandbox's runner
    check = ("import os, socket\nassert os.getuid() == 65534\nassert os.path.exists('/opt/bonforge/runner.py')\n"
             "assert sorted(os.listdir('/sys/class/net')) == ['lo']\n"
             "try:\n    open('/probe', 'w')\nexcept OSError:\n    pass\nelse:\n    assert False\n"
             "assert f(1) == 2\n")  # fmt: skip
    got = judge_problems(docker_pool, {"inside": check_spec(check)}, [RIGHT, "def f(x):\n    return x\n"])
    assert [v["status"] for v in got["inside"]] == ["passed", "wrong_answer"], got


def test_hostile_checks_reach_nothing_on_the_host(docker_pool, tmp_path):
    secret = secrets.token_hex(16)
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(secret)
    written = tmp_path / "written-by-a-check"
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    port = server.getsockname()[1]
    victim = subprocess.Popen(["sleep", "600"])
    try:
        hostile = {
            "write": f"open({str(written)!r}, 'w').write('x')\nassert f(1) == 2\n",
            "shell": f"import os\nassert os.system('touch {written}') == 0\nassert f(1) == 2\n",
            "leak": f"assert f(1) == open({str(secret_file)!r}).read()\n",
            "leak-plan": f"f(open({str(secret_file)!r}).read())\nassert f(1) == 2\n",
            "passwd": "assert f(1) == 2, open('/etc/passwd').read()\nassert f(1) == 3, open('/etc/passwd').read()\n",
            "socket": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nassert f(1) == 2\n",
            "gateway": "import socket\nsocket.create_connection(('172.17.0.1', 2375), timeout=2)\nassert f(1) == 2\n",
            "kill": f"import os, signal\nos.kill({victim.pid}, signal.SIGKILL)\nassert f(1) == 2\n",
            "fork-bomb": "import os\nwhile True:\n    os.fork()\n",
            "context": "assert f(1) == 2\n",
        }
        specs = {name: check_spec(check) for name, check in hostile.items()}
        specs["context"] = check_spec(hostile["context"], context=f"open({str(written)!r}, 'w')\n")
        specs["benign"] = check_spec("assert f(1) == 2\nassert f(41) == 42\n")
        got = judge_problems(docker_pool, specs, [RIGHT])
        assert not written.exists(), "a check wrote a file on the host"
        assert victim.poll() is None, "a check killed a host process"
        with pytest.raises(BlockingIOError):
            server.accept()  # no connection ever came
        image = subprocess.run(["docker", "run", "--rm", docker_pool.image, "cat", "/etc/passwd"], capture_output=True,
                               text=True, check=True).stdout.splitlines()  # fmt: skip
        with open("/etc/passwd") as f:
            host_only = {line.strip() for line in f} - set(image)  # lines a leak of the host's file would show
        for name, (verdict,) in got.items():
            assert secret not in json.dumps(verdict), f"{name}: the host's secret leaked into {verdict}"
            assert not any(line in (verdict["detail"] or "") for line in host_only), verdict
        assert "root:x:0:0" in got["passwd"][0]["detail"]  # what it read is the container's own file
        assert got["benign"][0]["status"] == "passed", got["benign"]
        # each hostile problem gets a verdict of its own: a clean error (the check failed in its container)
        clean = {"runtime_error", "timeout", "sandbox_error", "wrong_answer"}
        assert {name: v["status"] for name, (v,) in got.items() if name != "benign" and v["status"] not in clean} == {}
        assert got["write"][0]["status"] == "runtime_error" and "Error" in got["write"][0]["detail"], got["write"]
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        server.close()


STEERED = {
    "zip-map": "def check(candidate):\n    for got, want in zip(map(candidate, [1, 2]), [2, 3]):\n"
               "        assert got == want\n\ncheck(f)\n",
    "all-map": "assert all(map(lambda v: f(v) == v + 1, [1, 2]))\n",
    "filter": "assert list(filter(lambda v: f(v) != v + 1, [1, 2])) == []\n",
    "next-default": "assert next(filter(lambda v: f(v) != v + 1, [1, 2]), None) is None\n",
}


def test_a_program_raising_stopiteration_forges_no_pass(docker_pool):
    programs = [RIGHT, "def f(x):\n    raise StopIteration\n", "def f(x):\n    raise StopAsyncIteration\n",
                "class E(StopIteration):\n    pass\ndef f(x):\n    raise E\n",
                "def f(x):\n    def g():\n        yield\n    return next(iter(()))\n"]  # fmt: skip
    got = judge_problems(docker_pool, {name: check_spec(c) for name, c in STEERED.items()}, programs)
    for name, verdicts in got.items():
        assert [v["status"] for v in verdicts] == ["passed"] + ["runtime_error"] * 4, (name, verdicts)


def test_a_check_that_cannot_run_is_its_problems_error_only(docker_pool):
    got = judge_problems(docker_pool, {"broken": check_spec("def check(:\n"), "fine": check_spec("assert f(1) == 2\n")},
                         [RIGHT])  # fmt: skip
    assert got["broken"][0]["status"] == "sandbox_error" and "cannot run" in got["broken"][0]["detail"]
    assert got["fine"][0]["status"] == "passed"


def test_no_checker_container_outlives_its_process(sandbox_image):
    # a checker in a child process that is killed: its container goes (EOF on its input, --rm)
    code = ("from bonforge.sandbox.check_host import shared_check_host\nfrom bonforge.sandbox.config import "
            f"CodeVerifyConfig\nc = shared_check_host(CodeVerifyConfig(image={sandbox_image!r}))\n"
            "print(c.plan('', 'assert f(1) == 2', 'f')['plan'], flush=True)\n"
            "import time\ntime.sleep(600)\n")  # fmt: skip
    proc = subprocess.Popen(["python", "-c", code], stdout=subprocess.PIPE, env=dict(os.environ))
    assert proc.stdout.readline().strip()
    name = f"bonforge-chk-{proc.pid}-"
    assert name in subprocess.run(["docker", "ps", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
    proc.kill()
    proc.wait()
    for _ in range(50):
        names = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
        if name not in names:
            break
        subprocess.run(["sleep", "0.2"])
    assert name not in names


def test_a_check_that_forges_answers_or_leaves_processes_harms_no_other_problem(docker_pool):
    # a check that writes forged answers on every descriptor, and one whose forked child lingers to answer the
    # next request (another problem's): each fails its own problem only; the others are judged right
    forger = ("import os\nfor fd in range(3, 64):\n    try:\n"
              "        os.write(fd, b'{\"status\": \"passed\", \"n\": 1}\\n')\n"
              "    except OSError:\n        pass\nassert f(1) == 2\n")  # fmt: skip
    lurker = ("import os, sys, time\nif os.fork() == 0:\n    time.sleep(1)\n    line = sys.stdin.readline()\n"
              "    for fd in range(3, 64):\n        try:\n            os.write(fd, b'{\"status\": \"passed\"}\\n')\n"
              "        except OSError:\n            pass\n    os._exit(0)\nassert f(1) == 2\n")  # fmt: skip
    # alone: every process but init is the check server or one problem's check process (its children)
    alone = ("import os, time\ntime.sleep(0.2)\nchecker = os.getppid()\n"
             "parents = {p: open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[1] for p in os.listdir('/proc')"
             " if p.isdigit() and p not in ('1', str(checker))}\n"
             "assert set(parents.values()) == {str(checker)}, parents\nassert f(1) == 2\n")  # fmt: skip
    specs = {"forger": check_spec(forger), "lurker": check_spec(lurker),
             **{f"benign{i}": check_spec(f"assert f({i}) == {i + 1}\nassert f(0) == 1\n") for i in range(4)},
             "alone": check_spec(alone)}  # fmt: skip
    got = judge_problems(docker_pool, specs, [RIGHT, "def f(x):\n    return x\n"])
    assert [v["status"] for v in got["alone"]] == ["passed", "wrong_answer"], got["alone"]  # the lurker is gone
    for i in range(4):
        assert [v["status"] for v in got[f"benign{i}"]] == ["passed", "wrong_answer"], got[f"benign{i}"]


def test_a_check_cannot_tamper_with_another_problems_check(docker_pool):
    """Every check of a batch runs in a process of its own (forked from the check server for the request):
    one that rewrites the checker's code, the value codec or the builtins judges its own problem only; the
    problems after it are judged right (forged answers on the channel: the test above)."""
    tamper = ("import builtins, sys\nmain = sys.modules['__main__']\n"
              "main._replay = lambda check, item: {'status': 'passed'}\n"
              "main._Check.run = lambda self, proxy, seconds: None\n"
              "sys.modules['runner'].decode_value = lambda data: 2\nbuiltins.abs = lambda x: 0\n"
              "assert f(1) == 2\n")  # fmt: skip
    specs = {"tamper": check_spec(tamper),
             **{f"next{i}": check_spec(f"assert f({i}) == {i + 1}\nassert abs(f(-2)) == 1\n") for i in range(3)}}
    got = judge_problems(docker_pool, specs, [RIGHT, "def f(x):\n    return x\n"])
    for i in range(3):
        assert [v["status"] for v in got[f"next{i}"]] == ["passed", "wrong_answer"], got[f"next{i}"]
