"""The offline scorers on real text: language identification (no network touched) on arena-hard v2.0's
non-English requests, chrF/BLEU against a reference, and Best-of-N's pick, ties and filter."""

from __future__ import annotations

import json
import os
import socket
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from bonforge.config import BonConfig
from bonforge.scoring.config import LanguageScorer, ReferenceScorer
from bonforge.scoring import Item, open_scorer
from bonforge.stages.bon import best_of_n


@pytest.fixture
def data_dir() -> Path:
    path = Path(os.environ["BONFORGE_DATA"])
    if not (path / "arena-hard").is_dir():
        pytest.skip(f"no arena-hard data at {path} (set BONFORGE_DATA)")
    return path


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("a scorer opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_language_of_arena_hard_v2_answers_offline(data_dir, no_network):
    root = data_dir / "arena-hard" / "v2.0"
    questions = {r["uid"]: r["prompt"] for r in map(json.loads, (root / "question.jsonl").open())}
    answers = {r["uid"]: r["messages"][-1]["content"]["answer"]
               for r in map(json.loads, (root / "model_answer" / "o3-mini-2025-01-31.jsonl").open())}
    scorer = open_scorer(LanguageScorer(kind="language_id", name="lang"))
    items = [Item(question=questions[u], text=answers[u]) for u in sorted(questions)]
    results = scorer.score(items)
    expected = [json.loads(r.detail)["expected"] for r in results]
    foreign = [(e, r) for e, r in zip(expected, results) if e not in ("en", None)]
    # the detector names the requests' languages: Chinese and Russian lead, as in the data
    langs = Counter(e for e, _ in foreign)
    assert langs["zh"] >= 50 and langs["ru"] >= 50 and len(langs) >= 10
    # and the answers are mostly in the language of their request (value 1), named by their code
    assert sum(r.value for _, r in foreign) / len(foreign) >= 0.85
    assert {r.label for e, r in foreign if r.value == 1} >= {"zh", "ru", "ja", "es", "de", "fr"}


def test_language_from_the_problem_wins_over_the_request():
    scorer = open_scorer(LanguageScorer(kind="language_id", name="lang"))
    german = "Die Katze sitzt auf der Matte und schläft den ganzen Nachmittag."
    got = scorer.score([Item("Translate into German: the cat sleeps.", german, language="de"),
                        Item("Translate into German: the cat sleeps.", german),
                        Item("Say something.", None)])
    assert [r.value for r in got] == [1.0, 0.0, None]
    assert [r.status for r in got] == ["ok", "ok", "no_text"]
    assert json.loads(got[0].detail)["from"] == "problem" and json.loads(got[1].detail)["expected"] == "en"


def test_reference_metrics():
    ref = "The quick brown fox jumps over the lazy dog."
    items = [Item("q", ref, ref), Item("q", "A quick brown fox jumped over a lazy dog.", ref),
             Item("q", "Stock prices fell sharply on Monday.", ref), Item("q", "anything", None)]
    for metric in ("chrf", "chrf++", "bleu"):
        got = open_scorer(ReferenceScorer(kind="reference", name="m", metric=metric)).score(items)
        assert got[0].value == pytest.approx(100.0)
        assert got[0].value > got[1].value > got[2].value >= 0
        assert got[3].status == "no_reference" and got[3].value is None


def _scores(rows):
    names = ["problem_id", "candidate_id", "teacher", "scorer", "value", "status"]
    return pa.Table.from_pylist([dict(zip(names, r)) for r in rows])


def test_bon_picks_filters_and_breaks_ties_by_id():
    table = _scores([
        ("p", "p/a/0", "a", "rm", 2.0, "ok"), ("p", "p/a/0", "a", "lang", 0.0, "ok"),  # best, wrong language
        ("p", "p/a/1", "a", "rm", 1.5, "ok"), ("p", "p/a/1", "a", "lang", 1.0, "ok"),
        ("p", "p/b/0", "b", "rm", 1.5, "ok"), ("p", "p/b/0", "b", "lang", 1.0, "ok"),
        ("p", "p/b/1", "b", "rm", -3.0, "ok"), ("p", "p/b/1", "b", "lang", 1.0, "ok"),
        ("p", "p/b/2", "b", "rm", None, "no_text"), ("p", "p/b/2", "b", "lang", None, "no_text"),
        ("q", "q/a/0", "a", "rm", 0.1, "ok"), ("q", "q/a/0", "a", "lang", 0.0, "ok"),
    ])
    cfg = BonConfig(scorer="rm", filter={"language": "lang", "min": {"rm": -1.0}})
    rows = {(r["problem_id"], r["pool"]): r for r in best_of_n(table, cfg).to_pylist()}
    star = rows[("p", "*")]
    assert (star["candidate_id"], star["value"], star["runner_up"], star["tie"]) == ("p/a/1", 1.5, 1.5, True)
    assert star["n_candidates"] == 5 and star["n_eligible"] == 2
    assert (star["worst_candidate_id"], star["worst_value"]) == ("p/a/1", 1.5)  # equal values: the lower id
    assert dict(star["filtered"]) == {"language": 1, "min:rm": 1, "unscored": 1}
    assert rows[("p", "b")]["candidate_id"] == "p/b/0" and not rows[("p", "b")]["tie"]
    assert rows[("q", "*")]["candidate_id"] is None and rows[("q", "*")]["n_eligible"] == 0
    unfiltered = best_of_n(table, BonConfig(scorer="rm")).to_pylist()
    assert unfiltered[0]["candidate_id"] == "p/a/0" and unfiltered[0]["runner_up"] == 1.5


def test_embedding_similarity_with_the_minilm_from_its_wheel():
    ref = "The cat is sleeping on the warm windowsill."
    items = [Item("q", ref, ref), Item("q", "A cat naps on the sunny window ledge.", ref),
             Item("q", "Quarterly revenue grew by eight percent.", ref), Item("q", "x", None)]
    heard: list[int] = []
    got = open_scorer(ReferenceScorer(kind="reference", name="sim", metric="embed_cosine")).score(items, heard.append)
    assert heard == [4]  # one batch of the embedder (the item without a reference counted with it)
    assert got[0].value == pytest.approx(1.0, abs=1e-5)
    assert got[1].value > 0.6 > 0.2 > got[2].value
    assert got[3].status == "no_reference"
