"""The host's channel to its runners: a private socket folder, only the container's own runner let in,
answers matched to their requests and read with bounded size and depth, child-supplied fields capped."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from bonforge.sandbox import container
from bonforge.sandbox import pool as pool_mod
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.pool import SandboxPool
from test_sandbox import ADD, judge


@pytest.mark.docker
def test_socket_folder_is_private_and_the_socket_gone(docker_pool):
    for worker in list(docker_pool._workers):
        st = os.stat(worker._dir)
        assert (st.st_mode & 0o777, st.st_uid) == (0o700, container.RUNNER_UID)
        assert not os.path.exists(os.path.join(worker._dir, container.SOCKET_NAME))


def _impostor(path: str, stop: threading.Event, seen: list) -> None:
    """Connect before the runner does and answer every request with a pass."""
    while not os.path.exists(path) and not stop.is_set():
        time.sleep(0.005)
    conn = socket.socket(socket.AF_UNIX)
    try:
        conn.connect(path)
        seen.append("connected")
        conn.sendall(b'{"event": "ready"}\n')
        for line in conn.makefile("rb"):
            req = json.loads(line)
            result = {"status": "ok", "stdout": "5\n", "stderr": "", "cpu_s": 0.0, "wall_s": 0.0}
            answer = {"id": req["id"], "results": [result] * len(req["tests"]), "clean": True}
            conn.sendall(json.dumps(answer).encode() + b"\n")
    except OSError:
        seen.append("turned away")


@pytest.mark.docker
def test_a_process_that_connects_first_is_turned_away(sandbox_image, monkeypatch):
    """A local process that reaches the socket before the runner (here: the runner starts 1 s late) is
    refused by its peer credentials; the real runner still gets in and judges."""
    real, stop, seen = container.container_spec, threading.Event(), []

    def late_runner(cfg, image, name, socket_dir=None, **kwargs):
        path = os.path.join(socket_dir, container.SOCKET_NAME)
        threading.Thread(target=_impostor, args=(path, stop, seen), daemon=True).start()
        spec = real(cfg, image, name, socket_dir, **kwargs)
        return {**spec, "command": ["sh", "-c", 'sleep 1; exec "$@"', "sh", *spec["command"]]}

    monkeypatch.setattr(container, "container_spec", late_runner)
    try:
        with SandboxPool(CodeVerifyConfig(image=sandbox_image, pool_size=1, time_limit_s=1.0, memory_mb=256)) as pool:
            assert [v["status"] for v in judge(pool, [ADD, "print(5)\n"])] == ["passed", "wrong_answer"]
    finally:
        stop.set()
    assert seen[:2] == ["connected", "turned away"]


FAKE_RUNNER = r"""
import json, sys
mode = sys.argv[1]
out = sys.stdout.buffer
out.write(b'{"event": "ready"}\n'); out.flush()
for line in sys.stdin.buffer:
    req = json.loads(line)
    ok = {"status": "ok", "stdout": "5\n", "stderr": "", "cpu_s": 0.0, "wall_s": 0.0}
    answer = {"id": req["id"], "results": [ok] * len(req["tests"]), "clean": True}
    if mode == "other id":
        answer["id"] = "someone else"
        out.write(json.dumps(answer).encode() + b"\n")
    elif mode == "deep":
        out.write(b'{"id": ' + json.dumps(req["id"]).encode() + b', "results": ' + b"[" * 100000 + b"\n")
    elif mode == "huge":
        for _ in range(20000):
            out.write(b"x" * 4096)
        out.write(b"\n")
    elif mode == "bad field":
        answer["results"] = [dict(ok, status="passed", stdout=["5"])] * len(req["tests"])
        out.write(json.dumps(answer).encode() + b"\n")
    else:  # honest: the answer as a runner gives it
        out.write(json.dumps(answer).encode() + b"\n")
    out.flush()
"""


@pytest.mark.parametrize("mode, status, detail", [
    ("honest", "wrong_answer", "test 1: wrong_answer: expected '6\\n', got '5\\n'"),  # the control: read as sent
    ("other id", "sandbox_error", "an answer that is not for request 'p/t/0'"),
    ("deep", "sandbox_error", "garbled answer"),
    ("huge", "sandbox_error", "an answer over "),
    ("bad field", "sandbox_error", "malformed answer: result 0 field 'status': expected a status of the wire"),
])  # fmt: skip
def test_answers_are_matched_to_requests_and_read_with_bounds(tmp_path, monkeypatch, mode, status, detail):
    """A runner whose answers are for another request, nested 100,000 deep, 80 MB long or of the wrong
    shape never gives a verdict: the host refuses them, saying why (and the stage goes on). The same fake
    runner answering as a runner does gives the verdict its answer says (test 0's "5" right, test 1's wrong)."""
    fake = tmp_path / "fake_runner.py"
    fake.write_text(FAKE_RUNNER)
    monkeypatch.setattr(pool_mod, "process_argv", lambda cfg: [sys.executable, str(fake), mode])
    with SandboxPool(CodeVerifyConfig(backend="process", pool_size=1, retries=0)) as pool:
        (verdict,) = judge(pool, ["print(5)\n"])
    assert verdict["status"] == status and detail in verdict["detail"], verdict


@pytest.mark.docker
def test_child_supplied_fields_are_capped_in_the_runner(docker_pool):
    """Whatever a program writes on its result channel or stderr, the runner's answer stays small."""
    answers = []

    class Recording:
        cfg = docker_pool.cfg

        def run(self, requests):
            answers.extend(docker_pool.run(requests))
            return answers[-len(requests) :]

    half = docker_pool.cfg.output_limit_bytes // 2 - 1000
    programs = [
        f"import os\nos.write(3, b'{{\"s\": \"exc\", \"e\": \"' + b'x' * {half} + b'\"}}\\n' "
        f"+ b'e ' + b'x' * {half} + b'\\n')\n"
        "os._exit(1)\n",
        "import sys\nsys.stderr.write('e' * 20_000_000)\nraise SystemExit(3)\n",
        "import os\nos.write(3, b'x' * 30_000_000)\n",
    ]
    verdicts = judge(Recording(), programs)
    assert [v["status"] for v in verdicts] == ["runtime_error", "runtime_error", "output_limit"]
    for answer in answers:
        assert len(json.dumps(answer)) < 16384, [len(json.dumps(a)) for a in answers]


@pytest.mark.docker
def test_socket_folders_of_killed_pools_are_removed(sandbox_image):
    """A pool process killed before it could remove its socket folders leaves them in the temp folder; the
    next pool to start removes those whose owner is gone (and only those)."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tempfile.mkdtemp(prefix=f"bonforge-sbx-{gone.pid}-")
    alive = tempfile.mkdtemp(prefix=f"bonforge-sbx-{os.getpid()}-")
    try:
        with SandboxPool(CodeVerifyConfig(image=sandbox_image, pool_size=1)):
            pass
        assert not os.path.exists(dead) and os.path.exists(alive)
    finally:
        for path in (dead, alive):
            if os.path.exists(path):
                os.rmdir(path)
