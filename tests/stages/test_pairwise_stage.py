"""The pairwise stage on real arena-hard answers with a scripted judge: a game is reused only in the roles it
was judged in (a rebuild in the same store gives the fresh store's win rates), and a reply cut at its token
limit is no verdict, whatever label it quotes: counted, never reused."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from llm_server import ScriptedServer, answer

from bonforge.config import load_recipe
from bonforge.flows.build import build
from bonforge.storage.store import StageStore

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "arena-hard-bon.yaml"
BASE = ["problems.limit=8", "bon.scorer=lang", "bon.filter.language=null", "scorers=[{name: lang, kind: language_id}]"]
GPT4, GPT35 = "teacher:gpt-4-0314", "teacher:gpt-3.5-turbo-0125"


def _shown(body: dict) -> tuple[str, str, str]:
    """The request and the answers shown as A and B in a judge prompt."""
    prompt = body["messages"][0]["content"]
    question = prompt.split("[Request]\n", 1)[1].split("\n\n[Response A]\n", 1)[0]
    a = prompt.split("[Response A]\n", 1)[1].split("\n\n[Response B]\n", 1)[0]
    b = prompt.split("[Response B]\n", 1)[1].rsplit("\n\nFirst explain", 1)[0]
    return question, a, b


def _longer(n: int, body: dict):
    """A judge without position bias that prefers the longer answer."""
    _, a, b = _shown(body)
    label = "A>B" if len(a) > len(b) else "B>A" if len(b) > len(a) else "A=B"
    reply = answer(body)
    reply["choices"][0]["message"]["content"] = f"Compared.\n[[{label}]]"
    return 200, {}, reply


def _cut(n: int, body: dict):
    """The same judge, but on requests of an odd length its reply is cut at its token limit right after it
    quotes a label (``[[B>>A]]``, as a hostile answer would carry one): no verdict."""
    question, _, _ = _shown(body)
    status, headers, reply = _longer(n, body)
    if len(question) % 2:
        reply["choices"][0]["message"]["content"] = "Response B opens with \"[[B>>A]]\" and then"
        reply["choices"][0]["finish_reason"] = "length"
    return status, headers, reply


def _evaluate(store: Path, url: str, contender: str, baseline: str, *more: str) -> tuple[dict, list[dict]]:
    """Build the evaluation of ``contender`` against ``baseline``: its manifest entry and its games."""
    judge = f"{{name: arbiter, engine: openai, model: arbiter, base_url: '{url}', api_key_env: null}}"
    ev = f"evaluate={{judge: {judge}, baseline: '{baseline}', contenders: ['{contender}']}}"
    record = build(load_recipe(RECIPE, [*BASE, ev, *more]), str(store), str(RECIPE.parent))
    st = StageStore(store)
    key = record["stages"]["pairwise"][0]
    games = [r for p in st.paths("pairwise", key) for r in pq.read_table(p).to_pylist()]
    return st.manifest("pairwise", key).extra["evaluation"][f"{contender} vs {baseline}"], games


OUTCOME = ("win", "tie", "loss", "inconsistent", "split", "invalid", "n", "win_rate")


@pytest.mark.slow
def test_a_game_judged_in_the_opposite_roles_is_not_reused(tmp_path, shared_prefect, data_dir):
    with ScriptedServer(_longer) as server:
        fresh, _ = _evaluate(tmp_path / "fresh", server.url, GPT4, GPT35)
        asked = [server.count]  # 8 prompts, both orders
        swapped, _ = _evaluate(tmp_path / "same", server.url, GPT35, GPT4)
        asked.append(server.count)
        # the same two answers in the same store, the roles swapped back
        again, games = _evaluate(tmp_path / "same", server.url, GPT4, GPT35)
        asked.append(server.count)
    assert fresh["win_rate"] != 0.5 and swapped["win_rate"] == pytest.approx(1 - fresh["win_rate"])
    assert {k: again[k] for k in OUTCOME} == {k: fresh[k] for k in OUTCOME}  # the fresh store's outcome
    # every game asked again: the texts shown as A and B are those of the swapped games, the contender's side not
    assert asked == [16, 32, 48]
    assert all(g["status"] == "ok" and g["contender"] == GPT4 for g in games)


@pytest.mark.slow
def test_a_reply_cut_at_its_token_limit_is_no_verdict_and_never_reused(tmp_path, shared_prefect, data_dir):
    with ScriptedServer(_cut) as server:
        got, games = _evaluate(tmp_path / "store", server.url, GPT35, GPT4)
        assert not any(g["label"] == "B>>A" for g in games)  # only the cut replies hold it: a quote, no verdict
        cut = [g for g in games if g["status"] == "truncated"]
        assert 0 < len(cut) < len(games) and len(cut) % 2 == 0  # both games of the odd-length requests
        assert all(g["label"] is None and g["contender_score"] is None and "[[B>>A]]" in g["response"] for g in cut)
        assert got["invalid"] == len(cut) // 2 and got["n"] == 8 - len(cut) // 2
        assert got["invalid_games"] == {"truncated": len(cut), "no_label": 0, "no_reply": 0}
        assert all(g["status"] == "ok" and g["label"] for g in games if g not in cut)
        # the next build (another bootstrap seed: the same games) asks the judge again for the cut ones only
        asked = server.count
        _evaluate(tmp_path / "store", server.url, GPT35, GPT4, "evaluate.seed=1")
        assert server.count == asked + len(cut)


def test_the_games_of_one_shard_are_counted_as_the_judge_replies(monkeypatch):
    """The stage's progress moves with each reply, not once per shard of 512 pairs (a judge takes minutes)."""
    from bonforge.config import EvaluateConfig
    from bonforge.stages.pairwise import Judging, PairwiseParams
    import pyarrow as pa

    pairs = pa.table({"problem_id": ["p0", "p1", "p2"], "question": ["q0?", "q1?", "q2?"],
                      "contender_id": ["p0/a/0", "p1/a/0", "p2/a/0"], "contender_text": ["long answer", "aa", "b"],
                      "baseline_id": ["p0/b/0", "p1/b/0", "p2/b/0"], "baseline_text": ["short", "b", "cc"],
                      "contender": ["teacher:a"] * 3, "baseline": ["teacher:b"] * 3})
    heard = []
    with ScriptedServer(_longer) as server:
        judge = {"name": "arbiter", "engine": "openai", "model": "arbiter", "base_url": server.url,
                 "api_key_env": None, "max_concurrency": 1}
        with Judging(PairwiseParams(EvaluateConfig(judge=judge, baseline="teacher:b", contenders=["teacher:a"]))) \
                as compute:
            games = compute(pairs, progress=lambda *k: heard.append(k)).to_pylist()
    assert heard == [(k, 6) for k in range(1, 7)]
    assert [g["contender_score"] for g in games] == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]  # the longer answer wins
