"""The problem page in a real Chromium (Playwright, as test_browser.py drives it) over stores written by hand:
a statement is prose (only programs and code blocks are coloured), an open-ended problem shows its scores and
its Best-of-N pick (no verdicts, no gold answer, no "0 correct"), a pool's published labels sit beside our
verdicts with a filter for the candidates where they disagree (the problem page and the #labels list),
imported candidates show no latency, and an open-ended run lists its requests with their picks. Every stored
text carries HTML that must show as text and never run."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from labelled_store import DISAGREE, HOSTILE, PROGRAM, RUN, STATEMENT, labelled_store
from open_store import open_store
from viewer_helpers import serving

pw = pytest.importorskip("playwright.sync_api")
RECIPES = Path(__file__).resolve().parents[2] / "recipes"
expect = pw.expect
SPANS = "span.k, span.s, span.c, span.n"  # what colouring makes


@pytest.fixture
def lab(viewing, tmp_path):
    with serving(labelled_store(tmp_path / "store").root, tmp_path / "view.log") as url:
        yield viewing(url)


def test_a_statement_is_prose_and_programs_are_coloured(lab):
    page = lab.open(f"#problem?run={RUN}&id=c1")
    question = page.locator(".question")
    assert question.locator("pre.prose").first.text_content() == STATEMENT  # exactly as stored, markup as text
    # the statement's words (return, if, for, while, class, numbers, "quotes") are not coloured; only its code block
    assert question.locator(SPANS).count() == question.locator(f"code.block :is({SPANS})").count() > 0
    assert question.locator("code.block").text_content() == "def solve(n):\n    return n if n % 2 else 0\n"
    assert question.locator("pre.code").count() == 0
    program = page.locator(".cand[data-candidate='c1/model/0'] .text pre.code")
    assert program.text_content() == PROGRAM and program.locator("span.k").count() >= 3  # def, if, return
    page.click("details.gold summary")
    assert page.locator("details.gold pre.code span.k").count() > 0  # the reference solution is a program
    expect(page.locator("h2 small")).to_contain_text(HOSTILE)  # the source's markup, as text


def test_a_pools_labels_beside_our_verdicts_and_where_they_disagree(lab):
    page = lab.open(f"#problem?run={RUN}&id=c1")
    cards = page.locator(".cand")
    expect(cards).to_have_count(4)
    labels = dict(page.locator(".cand").evaluate_all(
        "els => els.map(e => [e.dataset.candidate, (e.querySelector('dd.label') || {}).textContent || null])"))
    assert labels == {"c1/model/0": None, "c1/pool/0": "correct", "c1/pool/1": "correctdisagrees with our verdict",
                      "c1/pool/2": "correct"}  # an infra_error verdict is no label: it does not disagree
    lab.then(lambda: page.click("[data-labels=disagree]"))
    assert "labels=disagree" in page.url
    assert cards.evaluate_all("els => els.map(e => e.dataset.candidate)") == ["c1/pool/1"]
    page = lab.open(f"#problem?run={RUN}&id=m1&labels=disagree")
    assert cards.evaluate_all("els => els.map(e => e.dataset.candidate)") == ["m1/pool/0"]
    # the run's list of disagreeing candidates, both ways, then one way; the controls never show
    lab.then(lambda: page.click("#nav a >> text=labels"))
    rows = page.locator("#label-disagreements tr[data-candidate]")

    def shown() -> set[str]:
        return set(rows.evaluate_all("els => els.map(e => e.dataset.candidate)"))

    assert shown() == set(DISAGREE)
    expect(page.locator("table.label-teachers tr[data-teacher=pool] td.num")).to_have_text(["5", "2"])
    for way in ("we_say_correct", "label_says_correct"):
        lab.then(lambda way=way: page.click(f"[data-way={way}]"))
        assert shown() == {cid for cid, w in DISAGREE.items() if w == way}
    expect(rows.first.locator("td.ans")).to_have_text("–")  # code: no extracted answer
    lab.then(lambda: page.click("[data-way=we_say_correct]"))
    expect(rows.first.locator("td.ans")).to_have_text(f"4{HOSTILE}")  # an answer with markup, as text
    lab.then(lambda: rows.first.locator("td").nth(1).locator("a").click())  # to the candidate on its problem page
    assert "cand=m1/pool/0" in unquote(page.url)
    expect(page.locator(".cand.focus")).to_have_count(1)


def test_imported_candidates_show_no_latency(lab):
    page = lab.open(f"#problem?run={RUN}&id=m1")
    terms = dict(page.locator(".cand").evaluate_all(
        "els => els.map(e => [e.dataset.candidate, [...e.querySelectorAll('dt')].map(d => d.textContent + '=' + "
        "d.nextElementSibling.textContent)])"))
    for cid in ("m1/pool/0", "m1/pool/1"):  # imported: no sampling, so no finish reason, tokens or latency
        assert "origin=imported" in terms[cid]
        assert not any(t.startswith(("latency", "finish", "tokens")) for t in terms[cid])
    sampled = terms["m1/model/0"]  # the control: sampled here
    assert {"finish=stop", "tokens=30 + 12", "verified in=7.5 ms"} <= set(sampled) and "origin=imported" not in sampled
    assert not any(t.startswith("latency") for t in sampled)  # the verdict's time is the verifier's, said so


@pytest.fixture
def arena(viewing, tmp_path):
    with serving(open_store(tmp_path / "store").root, tmp_path / "view.log") as url:
        yield viewing(url)


def test_an_open_ended_problem_shows_scores_and_its_pick(arena):
    page = arena.open("#runs?run=r")
    arena.then(lambda: page.click("text=browse its problems"))  # an open-ended run's list: no pass rates
    rows = page.locator("table.problems tr[data-problem]")
    assert rows.evaluate_all("els => els.map(e => [...e.cells].map(c => c.textContent))") == [
        ["de1", "Wie spät ist es?", "3", "de1/a/0", "rm 1.000"],
        ["en1", "What time is it?", "3", "en1/b/0", "rm 2.000"]]
    arena.then(lambda: rows.first.locator("a").first.click())
    main = page.locator("main")
    expect(page.locator(".cand")).to_have_count(3)
    text = main.inner_text()
    for failed in ("no verdict", "correct", "gold"):  # nothing reads as if every answer failed
        assert failed not in text, failed
    assert page.locator(".cand .badge").count() == 1
    pick = page.locator(".cand[data-candidate='de1/a/0']")
    expect(pick.locator(".badge.bon")).to_have_text("Best-of-N pick: rm 1.000")
    scores = dict(page.locator(".cand[data-candidate='de1/b/0'] dd.score").evaluate_all(
        "els => els.map(e => [e.dataset.scorer, e.textContent])"))
    assert scores == {"lang": "0.000 (en)", "rm": "2.000"}  # each scorer; b scores best but is not German
    bon = page.locator("table.open-bon tr[data-pool='*'] td")
    expect(bon.nth(4)).to_have_text("de1/a/0")
    expect(bon.nth(5)).to_have_text("1.000")
    expect(bon.nth(8)).to_have_text("language: 1")
    assert re.search(r"teacher a\s+1 candidate\b", text)


@pytest.mark.slow
def test_a_real_open_ended_build_reads_as_scored_with_imported_answers(viewing, tmp_path, shared_prefect):
    """arena-hard-bon as shipped, on three requests with the language scorer only: three real models' answers
    imported from their pool files, scored and picked; the page shows their scores and picks, 'imported' for
    each answer, and nothing that reads as a verdict."""
    from bonforge.config import load_recipe
    from bonforge.flows.build import build

    recipe = RECIPES / "arena-hard-bon.yaml"
    build(load_recipe(recipe, ["problems.limit=3", "scorers=[{name: lang, kind: language_id}]", "bon.scorer=lang",
                               "bon.filter.language=null"]), str(tmp_path / "store"), str(RECIPES))
    with serving(tmp_path / "store", tmp_path / "view.log") as url:
        view = viewing(url)
        page = view.open()
        view.then(lambda: page.click("text=browse its problems"))
        rows = page.locator("table.problems tr[data-problem]")
        expect(rows).to_have_count(3)
        pick = rows.first.locator("td").nth(3).inner_text()
        expect(rows.first.locator("td").nth(4)).to_have_text(re.compile(r"^lang \d\.\d{3}$"))
        view.then(lambda: rows.first.locator("a").first.click())
        cards = page.locator(".cand")
        expect(cards).to_have_count(3)
        assert page.locator(".cand dd.origin").all_inner_texts() == ["imported"] * 3
        assert page.locator(".cand dd.score[data-scorer=lang]").count() == 3
        expect(page.locator(f".cand[data-candidate='{pick}'] .badge.bon")).to_contain_text("Best-of-N pick: lang")
        text = page.locator("main").inner_text()
        assert not any(word in text for word in ("no verdict", "correct", "gold", "latency", "finish"))
