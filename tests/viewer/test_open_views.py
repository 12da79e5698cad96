"""The viewer's open-ended page over a small hand-written store (``/api/open``): each candidate with its scores,
the Best-of-N pick, the fused answer beside Best-of-N, and each pair's two games with the prompt's outcome;
the problem page links to it; a problem the run lacks is one clear error. The run's problem list (it has no
pass rates) shows each request's pick and refuses the filters it cannot apply."""

from __future__ import annotations

from open_store import open_store
from viewer_helpers import page_client

from bonforge.viewer.app import create_app


def test_open_page_shows_scores_picks_fusion_and_both_orders(tmp_path):
    store = open_store(tmp_path / "store")
    with page_client(create_app(store), base_url="http://127.0.0.1") as client:
        res = client.get("/api/open", params={"run": "r", "id": "de1"})
        assert res.status_code == 200, res.text
        data = res.json()
        problem = client.get("/api/problem", params={"run": "r", "id": "de1"}).json()
        missing = client.get("/api/open", params={"run": "r", "id": "nope"})
    assert problem["has"]["open"] == 6  # 3 candidates x 2 scorers: the problem page links to the open page
    by_id = {c["candidate_id"]: c for c in data["candidates"]}
    assert sorted(by_id) == ["de1/a/0", "de1/b/0", "de1/fusor/0"]
    assert {s["scorer"]: (s["value"], s["label"]) for s in by_id["de1/b/0"]["scores"]} == {
        "lang": (0.0, "en"), "rm": (2.0, None)}
    assert [c["candidate_id"] for c in data["candidates"] if c["bon"]] == ["de1/a/0"]
    assert data["bon"][0]["filtered"] == {"language": 1}
    assert data["fusion"]["fused_values"] == {"rm": 1.5} and data["fusion"]["bon_candidate_id"] == "de1/a/0"
    (pair,) = data["games"]
    assert (pair["contender"], pair["baseline"], pair["outcome"], pair["score"]) == ("fused", "teacher:b", "win", 1.0)
    assert [(g["game"], g["label"]) for g in pair["games"]] == [(0, "B>A"), (1, "A>B")]
    assert missing.status_code == 404 and "no problem 'nope'" in missing.json()["error"]


def test_open_problem_list_has_the_picks_and_refuses_pass_rate_filters(tmp_path):
    store = open_store(tmp_path / "store")
    with page_client(create_app(store), base_url="http://127.0.0.1") as client:
        data = client.get("/api/problems", params={"run": "r"}).json()
        found = client.get("/api/problems", params={"run": "r", "q": "TIME"}).json()
        german = client.get("/api/problems", params={"run": "r", "q": "spät"}).json()
        paged = client.get("/api/problems", params={"run": "r", "size": 1, "page": 1}).json()
        refused = [client.get("/api/problems", params={"run": "r", **f})
                   for f in ({"min": 0.5}, {"kept": "kept"}, {"sort": "pass_rate"}, {"status": "correct"})]
    assert data["open"] and data["total"] == 2
    assert [(r["problem_id"], r["n"], r["pick"], r["scorer"], r["value"]) for r in data["rows"]] == [
        ("de1", 3, "de1/a/0", "rm", 1.0), ("en1", 3, "en1/b/0", "rm", 2.0)]
    assert [r["problem_id"] for r in found["rows"]] == ["en1"] and [r["problem_id"] for r in german["rows"]] == ["de1"]
    assert [r["problem_id"] for r in paged["rows"]] == ["en1"] and paged["total"] == 2
    for res in refused:
        assert res.status_code == 400 and "open-ended: it has no pass rates" in res.json()["error"]
