"""A problems file edited in place is a new input (stage by stage, no Prefect): a fixed gold answer changes
that problem's verdicts and nothing is sampled again; appended problems are loaded, and only they are sampled
and verified (row reuse does the rest). Samples are counted in requests to a real test server."""

from __future__ import annotations

import json

from llm_server import ScriptedServer, adder

from bonforge.config import load_recipe
from bonforge.engine import run_node
from bonforge.stage import Ref
from bonforge.stages import load, sample, verify
from bonforge.storage.store import StageStore

N = 4


def write_problems(path, count: int, gold: dict[int, str] | None = None) -> None:
    rows = [{"id": f"q{i:03d}", "question": f"What is {i} + {2 * i}?", "answer": (gold or {}).get(i, str(3 * i))}
            for i in range(1, count + 1)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def build(store: StageStore, recipe_path) -> dict:
    recipe = load_recipe(recipe_path)
    ref = lambda man: Ref(man["stage"], man["key"], man)  # noqa: E731
    problems = ref(run_node(store, load.node(recipe, recipe_path.parent)))
    candidates = ref(run_node(store, sample.node(problems, recipe.teachers[0])))
    verdicts = run_node(store, verify.node(recipe, problems, candidates, {"math"}))
    return {"problems": problems.manifest, "candidates": candidates.manifest, "verdicts": verdicts,
            "correct": dict(zip(*store.read("verdicts", verdicts["key"], ["candidate_id", "correct"]).to_pydict()
                                .values()))}  # fmt: skip


def test_the_same_file_edited_in_place(tmp_path, monkeypatch):
    monkeypatch.setenv("BONFORGE_DIGESTS", str(tmp_path / "digests.sqlite"))
    store = StageStore(tmp_path / "store")
    with ScriptedServer(adder("so the answer is \\boxed{{{value}}}.")) as server:
        (tmp_path / "recipe.yaml").write_text(f"""
name: inplace
problems: {{name: toy, source: {{path: problems.jsonl}}, fields: {{id: id}}}}
teachers:
  - {{name: s, engine: openai, model: m, base_url: "{server.url}", api_key_env: null, n: {N}, max_tokens: 64,
     shard_problems: 4}}
export: {{name: toy-genselect}}
""")
        write_problems(tmp_path / "problems.jsonl", 10)
        first = build(store, tmp_path / "recipe.yaml")
        assert server.count == 10 * N and first["verdicts"]["rows_computed"] == 10 * N
        assert sum(first["correct"].values()) > 0

        write_problems(tmp_path / "problems.jsonl", 10, gold={7: "0"})  # one gold fixed, in the same file
        fixed = build(store, tmp_path / "recipe.yaml")
        assert fixed["problems"]["key"] != first["problems"]["key"]
        assert server.count == 10 * N  # nothing sampled again
        assert (fixed["candidates"]["rows_computed"], fixed["candidates"]["rows_reused"]) == (0, 10 * N)
        assert (fixed["verdicts"]["rows_computed"], fixed["verdicts"]["rows_reused"]) == (N, 9 * N)
        q7 = [c for c in fixed["correct"] if c.startswith("q007/")]
        assert len(q7) == N and not any(fixed["correct"][c] for c in q7)  # no candidate says 0
        assert {c: v for c, v in fixed["correct"].items() if c not in q7} == \
            {c: v for c, v in first["correct"].items() if c not in q7}

        with open(tmp_path / "problems.jsonl", "a") as f:  # the nightly "+1": appended rows, same file
            f.write(json.dumps({"id": "q011", "question": "What is 11 + 22?", "answer": "33"}) + "\n")
        grown = build(store, tmp_path / "recipe.yaml")
        assert grown["problems"]["rows"] == 11
        assert server.count == 11 * N  # only the new problem sampled
        assert (grown["candidates"]["rows_computed"], grown["candidates"]["rows_reused"]) == (N, 10 * N)
        assert (grown["verdicts"]["rows_computed"], grown["verdicts"]["rows_reused"]) == (N, 10 * N)

        again = build(store, tmp_path / "recipe.yaml")  # unchanged: every stage committed, nothing computed
        assert all(again[s]["key"] == grown[s]["key"] for s in ("problems", "candidates", "verdicts"))
        assert again["verdicts"].get("cached") and server.count == 11 * N
