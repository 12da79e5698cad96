"""FusioN end to end on the real four-teacher GSM8K pool, with the fusor served by a real local HTTP
server speaking the chat-completions API (it fuses by copying the response that holds the most common
final answer), through pools, fused candidates, verification, analysis, comparison and SFT export."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from golden_keys import assert_golden
from llm_server import ScriptedServer, answer

from bonforge.config import load_recipe
from bonforge.flows.build import build
from bonforge.storage.store import StageStore

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "gsm8k-fusion.yaml"
pytestmark = pytest.mark.slow

_BLOCK = re.compile(r"### Response (\d+)\n(.*?)(?=\n\n### Response \d+\n|\n\nStudy the responses)", re.S)


def responses(prompt: str) -> list[str]:
    return [m.group(2) for m in _BLOCK.finditer(prompt)]


def majority_copy(n: int, body: dict):
    """Fusion prompts: copy the response holding the most common final answer. Selection prompts (the
    selector): always pick candidate 0."""
    prompt = body["messages"][0]["content"]
    if "### Candidate 0" in prompt:
        reply = answer(body)
        reply["choices"][0]["message"]["content"] = "They differ; the first holds up.\nJudgment: 0"
        return 200, {}, reply
    texts = responses(prompt)
    finals = [(re.findall(r"(?m)^A:\s*(.+?)\s*$", t) or [None])[-1] for t in texts]
    top = Counter(f for f in finals if f).most_common(1)
    pick = finals.index(top[0][0]) if top else 0
    reply = answer(body)
    reply["choices"][0]["message"]["content"] = texts[pick]
    return 200, {}, reply


def test_fusion_build_compares_attributes_and_exports(tmp_path, gsm8k_pool, shared_prefect):
    import ray

    with ScriptedServer(majority_copy) as server:
        selector = f"{{name: selector, engine: openai, model: s, base_url: '{server.url}', api_key_env: null}}"
        recipe = load_recipe(RECIPE, ["problems.limit=30", f"fusion.fusor.base_url={server.url}",
                                      f"fusion.selector={selector}"])
        record = build(recipe, str(tmp_path / "store"), str(RECIPE.parent))
        assert server.count == 60  # 30 fusions + 30 selections
        assert_golden("gsm8k-fusion", record)
        again = build(recipe, str(tmp_path / "store"), str(RECIPE.parent))
        assert server.count == 60 and again["cached"] == again["stages"]  # nothing refused, nothing resampled
    ray.shutdown()
    store = StageStore(tmp_path / "store")
    (pools_key,) = record["stages"]["fusion_pools"]
    pools = store.read("fusion_pools", pools_key).to_pylist()
    assert len(pools) == 30
    for p in pools:
        assert sorted(p["teachers"]) == sorted(recipe.fusion.teachers)  # one from each teacher
        assert [c.split("/")[2] for c in p["candidate_ids"]] == p["teachers"]
    # deterministic: the same seed shuffles the same way
    assert pools[0]["pool_seed"] == store.read("fusion_pools", pools_key).column("pool_seed")[0].as_py()

    (fusion_key,) = record["stages"]["fusion"]
    rows = store.read("fusion", fusion_key).to_pylist()
    for r in rows:
        chars = dict(r["teacher_chars"])
        assert sum(chars.values()) == r["total_chars"] > 0
        # the fusor copied one pool member verbatim: one teacher owns it all (or several, if texts coincide)
        assert set(chars) <= set(recipe.fusion.teachers) | {"multiple"} and len(chars) == 1
        assert sum(r["position_chars"]) + r["position_multiple"] + r["position_unmatched"] == r["total_chars"]
        assert r["oracle"] >= r["random"]
    comp = store.manifest("fusion", fusion_key)["comparison"]
    assert comp["problems"] == 30
    assert set(comp) >= {"fused", "oracle_pass_at_n", "majority_vote", "random_pick", "contribution_fraction"}
    assert comp["oracle_pass_at_n"] >= comp["fused"]  # copying a pool member cannot beat the oracle
    assert comp["fused"] == sum(r["fused_correct"] for r in rows) / 30
    # GenSelect on the same pools: the scripted selector always picks position 0
    correct = {}
    for k in record["stages"]["verdicts"]:
        v = store.read("verdicts", k)
        correct.update(zip(v.column("candidate_id").to_pylist(), v.column("correct").to_pylist()))
    first_ok = {r["problem_id"]: r["genselect"] for r in rows}
    assert first_ok == {p["problem_id"]: float(correct[p["candidate_ids"][0]]) for p in pools}
    assert comp["genselect"] == sum(first_ok.values()) / 30

    sft = Path(record["fusion_dataset"])
    trl = pq.read_table(sft / "trl" / "train.parquet").to_pylist()
    assert len(trl) == sum(r["fused_correct"] for r in rows)
    assert all(m["messages"][1]["role"] == "assistant" for m in trl)
    man = json.loads((sft / "manifest.json").read_text())
    assert man["stages"]["fusion_pools"] == [pools_key]
