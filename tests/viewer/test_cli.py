"""`bonforge view` from the command line: a bad run is one error line, and an address other than a
loopback name gets a token printed in the URL, without which the server answers 403."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import httpx
from procs import free_port, kill_group, start
from typer.testing import CliRunner

from bonforge.cli import app

REPO = Path(__file__).resolve().parents[2]


def test_view_of_a_run_that_does_not_exist(tmp_path):
    res = CliRunner().invoke(app, ["view", "--store", str(tmp_path / "store"), "--run", "nope"])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        f"error: no runs recorded in {(tmp_path / 'store').resolve()}; run `bonforge run RECIPE` first"]


def test_a_non_loopback_host_needs_the_printed_token(tmp_path):
    port = free_port()
    log = tmp_path / "view.log"
    proc = start(["-m", "bonforge", "view", "--store", str(tmp_path / "store"), "--host", "127.0.0.2",
                  "--port", str(port)], env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}, log=log)
    try:
        deadline = time.monotonic() + 60
        while not (m := re.search(r"bonforge view: (http://127\.0\.0\.2:\d+/\?token=([\w-]+))", log.read_text())):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        url, token = m.group(1), m.group(2)
        base = f"http://127.0.0.2:{port}"
        while True:  # the line is printed before uvicorn listens
            try:
                refused = httpx.get(f"{base}/api/runs", timeout=5)
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert refused.status_code == 403 and "token" in refused.json()["error"]
        assert httpx.get(f"{base}/api/runs", params={"token": "x" + token}, timeout=5).status_code == 403
        with httpx.Client(timeout=5) as client:
            page = client.get(url)
            assert page.status_code == 200 and "/static/app.js" in page.text
            key = re.search(r'<meta name="bonforge-key" content="([\w-]+)">', page.text).group(1)
            assert client.get(f"{base}/api/runs").status_code == 403  # the token, but not the page's key
            runs = client.get(f"{base}/api/runs", headers={"X-Bonforge-Key": key})  # the cookie carries the token
            assert runs.json()["runs"] == []
    finally:
        kill_group(proc)
