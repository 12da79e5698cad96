"""In a real Chromium: a page of another origin (a second local server on another port, reached as another
site and as the same site) that posts a form to the SQL box and loads an export as an ``<img>`` gets 403
for both, while the viewer's own page still runs a query and downloads an export."""

from __future__ import annotations

import csv
import io
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from procs import free_port, kill_group, start
from viewer_helpers import PROBLEMS, small_store

pw = pytest.importorskip("playwright.sync_api")
REPO = Path(__file__).resolve().parents[2]

ATTACK = """<!doctype html><html><head><link rel="icon" href="data:,"></head><body>
<iframe name="sink"></iframe>
<form id="f" method="POST" target="sink" enctype="text/plain" action="{viewer}api/sql">
<input type="hidden" name='{{"sql": "SELECT count(*) FROM problems", "x": "' value='"}}'></form>
<img id="i" src="{viewer}api/export?view=sql&format=csv&q=SELECT%20*%20FROM%20problems">
<script>document.getElementById("f").submit();</script>
</body></html>"""


@pytest.fixture(scope="module")
def viewer(tmp_path_factory):
    """`bonforge view` over a small store, on a free loopback port; yields its URL."""
    store, _ = small_store(tmp_path_factory.mktemp("cross") / "store")
    port, log = free_port(), tmp_path_factory.mktemp("cross-log") / "view.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    proc = start(["-m", "bonforge", "view", "--store", str(store.root), "--port", str(port)], env=env, log=log)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield url
    finally:
        kill_group(proc)


@pytest.fixture(scope="module")
def other_origin(viewer):
    """A second local web server, on another port, whose page attacks the viewer; yields its port."""
    page = ATTACK.format(viewer=viewer).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])  # another site; the same site on another port
def test_a_form_post_and_an_img_of_another_origin_get_403(page, viewer, other_origin, host):
    # The status as the server sent it, from the DevTools protocol: Chromium hides the <img>'s response from
    # the page (ORB), but the request reached the server, and it is the server's answer that matters.
    urls, statuses = {}, {}
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.on("Network.requestWillBeSent", lambda e: urls.setdefault(e["requestId"], e["request"]["url"]))
    cdp.on("Network.responseReceivedExtraInfo", lambda e: statuses.setdefault(e["requestId"], e["statusCode"]))
    page.goto(f"http://{host}:{other_origin}/")
    seen: dict[str, int] = {}
    deadline = time.monotonic() + 20
    while len(seen) < 2 and time.monotonic() < deadline:
        page.wait_for_timeout(100)
        seen = {urls[i].split("?")[0]: s for i, s in statuses.items() if urls.get(i, "").startswith(viewer)}
    assert seen == {viewer + "api/sql": 403, viewer + "api/export": 403}
    assert "the viewer answers its own page only" in page.frame("sink").content()


def test_the_pages_own_query_and_export_still_work(page, viewer):
    page.goto(viewer + "#sql?run=run1&q=" + "SELECT problem_id FROM problems ORDER BY problem_id")
    page.wait_for_selector("#sql-result")
    assert page.locator("#sql-result tr").count() == PROBLEMS + 1
    with page.expect_download() as download:
        page.click(".export a[data-format=csv]")
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert [r["problem_id"] for r in rows] == [f"p{i}" for i in range(PROBLEMS)]
    page.goto(viewer)
    page.wait_for_selector("table.runs")
    assert page.locator("table.runs tr").count() == 2  # header + the run
