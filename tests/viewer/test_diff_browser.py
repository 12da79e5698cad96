"""The #diff page in a real Chromium (Playwright, as test_browser.py drives it): a store of two runs written
directly, served by `bonforge view`; the confusion table, the flips linked to both runs' problem pages, the
hostile problem id shown as text, no console error."""

from __future__ import annotations

import os
import time
from pathlib import Path

import diff_store
import pytest

pw = pytest.importorskip("playwright.sync_api")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def diff_url(tmp_path):
    import httpx
    from procs import free_port, kill_group, start

    store = diff_store.two_runs(tmp_path / "store")
    port = free_port()
    proc = start(["-m", "bonforge", "view", "--store", str(store.root), "--port", str(port)],
                 env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}, log=tmp_path / "view.log")
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "view.log").read_text()
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.3)
        yield url
    finally:
        kill_group(proc)


def test_the_diff_page_from_the_runs_page(page, diff_url):
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    page.goto(diff_url + "#runs?run=20260101-bbbbbb")
    page.wait_for_selector("main[data-ready]")
    page.click("a.diff-link")  # the other run, against the selected one
    page.wait_for_selector("main[data-view=diff] #confusion")
    pw.expect(page.locator("#diff-summary")).to_contain_text("flipped 3")
    pw.expect(page.locator("#confusion td[data-a=correct][data-b=no_answer]")).to_have_text("1")
    pw.expect(page.locator("[data-agreement=status]")).to_contain_text("kappa 0.1818")
    hostile = page.locator("#flips tr[data-candidate$='/t/1']").first
    pw.expect(hostile.locator("td").first).to_have_text(diff_store.HOSTILE)  # text, never markup
    assert page.locator("main b:text-is('x')").count() == 0
    pw.expect(page.locator("#problem-changes tr")).to_have_count(4)  # header + three problems
    hrefs = page.locator("a[href^='#']").evaluate_all("els => els.map(e => e.getAttribute('href'))")
    assert hrefs and all("run=" in h for h in hrefs), hrefs  # every link names its run, as test_browser asks
    hostile.locator("td").nth(3).locator("a").click()  # A's side: run A's problem page, the candidate in view
    page.wait_for_selector("main[data-view=problem][data-ready]")
    assert "run=20260101-aaaaaa" in page.url and "cand=" in page.url
    pw.expect(page.locator("h2")).to_contain_text(f"Problem {diff_store.HOSTILE}")
    assert errors == []
