"""The #diff page in a real Chromium (Playwright, as test_browser.py drives it): a store of two runs written
directly, served by `bonforge view`; the confusion table, the flips linked to both runs' problem pages, the
hostile problem id shown as text, no console error."""

from __future__ import annotations

import diff_store
import pytest

pw = pytest.importorskip("playwright.sync_api")


@pytest.fixture
def diff_url(tmp_path):
    from viewer_helpers import serving

    with serving(diff_store.two_runs(tmp_path / "store").root, tmp_path / "view.log") as url:
        yield url


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
