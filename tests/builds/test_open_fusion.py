"""FusioN without a gold answer, end to end on the real arena-hard files with the CPU stand-ins the recipe
ships (SmolLM2 through transformers as fusor and judges, SmolLM2 with a seeded score head as reward model):
scores of every answer and of the fused ones, Best-of-N, pools after the hard filter, the fused answer beside
Best-of-N, the pairwise evaluation in both orders, the three exports and the report's open-ended tables."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bonforge.config import load_recipe
from bonforge.flows.build import build
from bonforge.report import write_report
from bonforge.storage.store import StageStore

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "arena-hard-fusion.yaml"
pytestmark = pytest.mark.slow


def _rows(st: StageStore, stage: str, keys: list[str]) -> list[dict]:
    return [r for k in keys for p in st.paths(stage, k) for r in pq.read_table(p).to_pylist()]


def test_open_fusion_recipe_builds_scores_fuses_judges_and_exports(tmp_path, shared_prefect):
    pytest.importorskip("gguf")
    # one request and short generations: the stages and their tables are what is tested, not SmolLM2's prose
    recipe = load_recipe(RECIPE, ["problems.limit=1", "fusion.fusor.max_tokens=32", "evaluate.judge.max_tokens=16"])
    record = build(recipe, str(tmp_path / "store"), str(RECIPE.parent))
    st, keys = StageStore(tmp_path / "store"), record["stages"]
    # the fused answers are an ordinary candidates stage, scored by every scorer like the teachers' answers
    assert len(keys["candidates"]) == 4 and len(keys["scores"]) == 4
    scores = _rows(st, "scores", keys["scores"])
    fused = [r for r in scores if r["teacher"] == "fusor"]
    assert sorted({r["scorer"] for r in fused}) == ["judge", "lang", "rm"] and len(fused) == 1 * 3
    assert all(r["status"] == "ok" for r in fused if r["scorer"] == "rm")
    judged = [r for r in scores if r["scorer"] == "judge"]
    assert all((r["status"] == "ok") == (r["value"] is not None) for r in judged)  # a parse failure has no value
    # the pools hold only answers the hard filter (language) keeps, three teachers at most
    pools = _rows(st, "fusion_pools", keys["fusion_pools"])
    lang = {r["candidate_id"]: r["value"] for r in scores if r["scorer"] == "lang"}
    assert len(pools) == 1 and all(lang[c] == 1.0 for p in pools for c in p["candidate_ids"])
    # the fused answer beside Best-of-N on the same pool; the selection scorer marked
    beside = _rows(st, "fusion_open", keys["fusion_open"])
    assert len(beside) == 1 and all(r["bon_candidate_id"] in p["candidate_ids"] for r, p in zip(beside, pools))
    cmp = st.manifest("fusion_open", keys["fusion_open"][0]).extra["comparison"]
    assert cmp["selection_scorer"] == "rm" and cmp["scorers"]["rm"]["selection"] is True
    assert cmp["scorers"]["lang"]["selection"] is False
    # pairwise: fused and Best-of-N against gpt-4-0314, and fused against Best-of-N, both orders
    games = _rows(st, "pairwise", keys["pairwise"])
    pairs = {(g["contender"], g["baseline"]) for g in games}
    assert pairs == {("fused", "teacher:gpt-4-0314"), ("bon", "teacher:gpt-4-0314"), ("fused", "bon")}
    assert len(games) == 3 * 2 * 1 and sorted({g["game"] for g in games}) == [0, 1]
    evaluation = st.manifest("pairwise", keys["pairwise"][0]).extra["evaluation"]
    for name, e in evaluation.items():
        outcomes = sum(e[k] for k in ("win", "tie", "loss", "inconsistent", "split", "invalid"))
        assert outcomes == 1 and e["n"] == 1 - e["invalid"], name
        assert e["win_rate"] is None or e["ci_low"] <= e["win_rate"] <= e["ci_high"]
        # SmolLM2 judges and fused: every evaluation of a fused answer says the judge graded its own writing
        assert ("warning" in e) == ("fused" in name) and "fusor's model" in e.get("warning", "fusor's model")
    # three exports: Best-of-N SFT, preferences, fused SFT (fused answers the hard filter keeps)
    fused_sft = Path(record["fusion_dataset"]) / "trl" / "train.parquet"
    kept = {r["candidate_id"] for r in fused if r["scorer"] == "lang" and r["value"] == 1.0}
    assert {r["candidate_id"] for r in pq.read_table(fused_sft).to_pylist()} == kept
    manifest = json.loads((fused_sft.parents[1] / "manifest.json").read_text())
    assert manifest["trainers"]["trl"]["trainer"] == "SFTTrainer"
    assert Path(record["dataset"]).exists() and Path(record["preference_dataset"]).exists()
    # the report's open-ended tables: per language and per category
    page = Path(write_report(st, record.run_id)).read_text()
    for section in ("bon_scores", "fusion_scores", "win_rates"):
        assert f'<section id="{section}"' in page
    assert re.search(r"<td>fused</td><td>bon</td><td>language</td><td>en</td><td>\d+</td>", page)
    assert "Warning: the judge (smollm2-135m-instruct) is the fusor&#x27;s model" in page
    assert re.search(r"<td>category</td><td>arena-hard-v0.1</td>", page)
    assert "rm (selection scorer)" in page
    # nothing is asked again on a rebuild
    again = build(recipe, str(tmp_path / "store"), str(RECIPE.parent))
    assert again["cached"] == again["stages"]
