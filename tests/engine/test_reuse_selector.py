"""Row-level reuse of the selector's calls (``selector_eval``, ``fusion_select``), counted in requests to the real
OpenAI-compatible test server: more runs ask only the new runs, the same prompts ask nothing, a changed selector
setting or ``--fresh`` asks everything, and a build that reuses rows writes what a build from scratch writes."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from llm_server import ScriptedServer, answer

from bonforge.config import Recipe
from bonforge.engine import run_node
from bonforge.llm.config import OpenAITeacher
from bonforge.schema import CANDIDATES, FUSION_POOLS, GENSELECT, PROBLEMS, VERDICTS, conform
from bonforge.stage import Ref
from bonforge.stages import fuse, select_eval
from bonforge.storage.store import StageStore

PROMPTS = 6  # 3 problems x 2 prompts
RECIPE = Recipe.model_validate({"name": "r", "problems": {"name": "t", "source": {"path": "x"}}, "teachers": [
    {"name": "t", "engine": "pool", "source": {"path": "x"}, "samples": "s"}], "export": {"name": "d"}})


def judge(n: int, body: dict):
    """``Judgment: seed % 3``: the reply depends on the prompt's seed only."""
    reply = answer(body)
    reply["choices"][0]["message"]["content"] = f"Looks right.\nJudgment: {body['seed'] % 3}"
    return 200, {}, reply


def selector(url: str, **kw) -> OpenAITeacher:
    return OpenAITeacher(engine="openai", name="selector", model="judge", base_url=url, api_key_env=None,
                         max_tokens=32, **kw)


def commit(store: StageStore, stage: str, key: str, table: pa.Table) -> Ref:
    if not store.exists(stage, key):
        store.write_shard(stage, key, 0, table)
        store.commit(stage, key, 1, version="1", config={}, upstream={})
    return Ref(stage, key, store.manifest(stage, key))


def base(store: StageStore, key: str) -> dict[str, list[Ref]]:
    """GenSelect prompts of 3 candidates each (committed under ``key``) and their candidates' verdicts."""
    prompts = [{"prompt_id": f"p{i}#{j}", "problem_id": f"p{i}", "prompt_index": j,
                "candidate_ids": [f"p{i}/t/{c}" for c in range(3)], "n_candidates": 3, "correct_indices": [j],
                "prompt": f"Problem {i}, prompt {j}\n### Candidate 0\n### Candidate 1\n### Candidate 2", "n_tokens": 20,
                "token_counter": "estimate"} for i in range(PROMPTS // 2) for j in range(2)]
    verdicts = [{"candidate_id": f"p{i}/t/{c}", "problem_id": f"p{i}", "teacher": "t", "extracted": str(c),
                 "correct": c == 0, "reward": float(c == 0), "status": "correct" if c == 0 else "wrong_answer"}
                for i in range(PROMPTS // 2) for c in range(3)]
    return {"genselect": [commit(store, "genselect", key, pa.Table.from_pylist(prompts, schema=GENSELECT))],
            "verdicts": [commit(store, "verdicts", key, conform(pa.Table.from_pylist(verdicts), VERDICTS))]}


def evaluate(store: StageStore, key: str, teacher: OpenAITeacher, runs: int, reuse_rows: bool = True) -> dict:
    node = select_eval.node(RECIPE, teacher, runs, False, "genselect", base(store, key))
    return run_node(store, node, reuse_rows)


def test_more_runs_ask_only_the_new_runs_and_change_nothing(tmp_path):
    store, scratch = StageStore(tmp_path / "a"), StageStore(tmp_path / "b")
    with ScriptedServer(judge) as server:
        evaluate(store, "g1", selector(server.url), runs=2)
        assert server.count == PROMPTS * 2
        more = evaluate(store, "g1", selector(server.url), runs=4)  # runs 2 and 3 of every prompt only
        assert server.count == PROMPTS * 4
        assert (more["rows_computed"], more["rows_reused"]) == (PROMPTS * 2, PROMPTS * 2)
        seeds = sorted(b["seed"] for b in server.bodies[PROMPTS * 2:])
        first = sorted(b["seed"] for b in server.bodies[:PROMPTS * 2])
        assert seeds == sorted(s + 2 for s in first)  # the new runs' seeds: seed + run, as from scratch

        cached = evaluate(store, "g1", selector(server.url), runs=4)  # the same build again: committed
        assert cached["cached"] and server.count == PROMPTS * 4
        same = evaluate(store, "g2", selector(server.url), runs=4)  # the same prompts under another key
        assert server.count == PROMPTS * 4 and same["rows_reused"] == PROMPTS * 4

        fresh = evaluate(scratch, "g1", selector(server.url), runs=4)  # from scratch: the same rows
        assert server.count == PROMPTS * 8
        assert store.read("selector_eval", more["key"]).equals(scratch.read("selector_eval", fresh["key"]))
        assert store.read("selector_eval", same["key"]).equals(scratch.read("selector_eval", fresh["key"]))


def test_the_selector_stages_record_what_their_calls_cost(tmp_path):
    """Every row its call's cost at the selector's prices; the manifest what the rows cost and what this build
    paid: more runs pay for the new runs only, the reused rows keep their cost."""
    store, prices = StageStore(tmp_path), {"input": 1.0, "output": 2.0}
    with ScriptedServer(judge) as server:
        first = evaluate(store, "g1", selector(server.url, prices=prices), runs=1)
        rows = store.read("selector_eval", first["key"])
        bodies = {(b["messages"][0]["content"], b["seed"]) for b in server.bodies}
        assert len(bodies) == PROMPTS and rows.column("cost_usd").null_count == 0
        call = rows.column("cost_usd")[0].as_py()
        assert call == pytest.approx((rows.column("prompt_tokens")[0].as_py() + 2 * 7) / 1e6)  # 7 answer tokens
        cost = store.manifest("selector_eval", first["key"]).extra["cost"]
        assert cost["rows_usd"] == pytest.approx(sum(rows.column("cost_usd").to_pylist()))
        assert cost["spent_usd"] == pytest.approx(cost["rows_usd"]) and cost["unpriced_rows"] == 0
        more = evaluate(store, "g1", selector(server.url, prices=prices), runs=2)
        again = store.manifest("selector_eval", more["key"]).extra["cost"]
        new = store.read("selector_eval", more["key"]).filter(pc.field("run") == 1)
        assert again["rows_usd"] == pytest.approx(2 * cost["rows_usd"])  # each run's prompts cost the same
        assert again["spent_usd"] == pytest.approx(sum(new.column("cost_usd").to_pylist()))  # the new run only

        engine = {"engine": "openai", "base_url": server.url, "api_key_env": None}
        recipe = Recipe.model_validate({**RECIPE.model_dump(exclude_none=True), "fusion": {
            "teachers": {"t": 3}, "export": {"name": "f"}, "fusor": {"name": "fusor", "model": "f", **engine},
            "selector": {"name": "selector", "model": "judge", "max_tokens": 32, "prices": prices, **engine}}})
        picked = run_node(store, fusion_select(store, recipe, 2))
        assert store.manifest("fusion_select", picked["key"]).extra["cost"]["priced_rows"] == 2


def test_a_changed_setting_or_fresh_asks_every_run_again(tmp_path):
    store = StageStore(tmp_path)
    with ScriptedServer(judge) as server:
        evaluate(store, "g1", selector(server.url), runs=2)
        hotter = evaluate(store, "g1", selector(server.url, temperature=0.9), runs=2)
        assert server.count == PROMPTS * 4 and hotter["rows_reused"] == 0
        again = evaluate(store, "g1", selector(server.url), runs=2, reuse_rows=False)  # --fresh
        assert server.count == PROMPTS * 6 and again["rows_reused"] == 0 and not again["cached"]
        skip = run_node(store, select_eval.node(RECIPE, selector(server.url), 2, True, "genselect", base(store, "g1")))
        assert server.count == PROMPTS * 8 and skip["rows_reused"] == 0  # skip_unanimous is part of the identity


def test_fusion_select_asks_only_the_new_pools(tmp_path):
    store = StageStore(tmp_path)
    with ScriptedServer(judge) as server:
        engine = {"engine": "openai", "base_url": server.url, "api_key_env": None}
        recipe = Recipe.model_validate({**RECIPE.model_dump(exclude_none=True), "fusion": {
            "teachers": {"t": 3}, "export": {"name": "f"}, "fusor": {"name": "fusor", "model": "f", **engine},
            "selector": {"name": "selector", "model": "judge", "max_tokens": 32, **engine}}})
        first = run_node(store, fusion_select(store, recipe, 2))
        assert server.count == 2 and first["rows_reused"] == 0
        grown = run_node(store, fusion_select(store, recipe, 3))  # one more pool: one more call
        assert server.count == 3 and (grown["rows_computed"], grown["rows_reused"]) == (1, 2)


def fusion_select(store: StageStore, recipe: Recipe, count: int):
    """The fusion_select node over ``count`` pools of 3 candidates (inputs committed under their own keys)."""
    key = f"n{count}"
    problems = [{"problem_id": f"p{i}", "source": "t", "domain": "math", "question": f"What is {i}?", "answer": "0",
                 "metadata": "{}"} for i in range(count)]
    pools = [{"problem_id": f"p{i}", "domain": "math", "pool_seed": i, "teachers": ["t"] * 3,
              "candidate_ids": [f"p{i}/t/{c}" for c in range(3)], "prompt": f"fuse {i}"} for i in range(count)]
    cands = [{"candidate_id": f"p{i}/t/{c}", "problem_id": f"p{i}", "teacher": "t", "sample_index": c,
              "text": f"answer {c}"} for i in range(count) for c in range(3)]
    return fuse.select_node(recipe, commit(store, "problems", key, conform(pa.Table.from_pylist(problems), PROBLEMS)),
                            commit(store, "fusion_pools", key, pa.Table.from_pylist(pools, schema=FUSION_POOLS)),
                            [commit(store, "candidates", key, conform(pa.Table.from_pylist(cands), CANDIDATES))],
                            base(store, key)["verdicts"])
