"""A trajectory on the problem page in a real Chromium: turn by turn from the model's first turn, its Python
calls highlighted, each tool output folded until opened; a plain answer beside it shows as before (control).
The tool output and the answer carry HTML that must show as text and never run."""

from __future__ import annotations

import json

import pytest
from viewer_helpers import serving

from bonforge.config import load_recipe
from bonforge.flows.build import build

pw = pytest.importorskip("playwright.sync_api")
HOSTILE = '<img src=x onerror="window.__pwned = 1">'


def trajectory(k: int) -> list[dict]:
    code = json.dumps({"code": f"def f():\n    return {k}"})
    call = {"id": "c0", "type": "function", "function": {"name": "python", "arguments": code}}
    return [{"role": "user", "content": f"What is {k}?"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c0", "content": f"{k}\n{HOSTILE}"},
            {"role": "assistant", "content": f"It is {k}. {HOSTILE}\nA: {k}"}]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("trajectories")
    (root / "problems.jsonl").write_text("".join(json.dumps({"question": f"What is {k}?", "answer": str(k)}) + "\n"
                                                 for k in range(3)))
    (root / "pool.jsonl").write_text("".join(json.dumps({"question": f"What is {k}?", "messages": trajectory(k),
                                                         "plain": f"A: {k + 1}"}) + "\n" for k in range(3)))
    (root / "recipe.yaml").write_text("""
name: view
problems: {name: v, domain: math, source: {path: problems.jsonl}}
teachers:
  - {name: tir, engine: pool, source: {path: pool.jsonl}, format: messages}
  - {name: plain, engine: pool, source: {path: pool.jsonl}, samples: plain}
verify: {math: {patterns: ['(?m)^A:\\s*(.+?)\\s*$']}}
export: {name: view, allow_empty: true}
""")
    run = build(load_recipe(root / "recipe.yaml"), str(root / "store"), str(root))
    return root / "store", run.run_id


def test_a_trajectory_is_shown_turn_by_turn_with_tool_outputs_folded(viewing, store, tmp_path):
    root, run = store
    with serving(root, tmp_path / "view.log") as url:
        page = viewing(url).open(f"#problem?run={run}&id=v/00001")
        card = page.locator(".cand[data-candidate='v/00001/tir/0']")
        assert card.locator(".trajectory .facts").text_content() == "trajectory: 2 turns, 1 tool call"
        turns = card.locator(".trajectory > .turn")
        assert turns.evaluate_all("els => els.map(e => e.className)") == ["turn model", "turn tool", "turn model"]
        code = card.locator(".call pre.code")
        assert code.text_content() == "def f():\n    return 1" and code.locator("span.k").count() == 2
        output = card.locator("details.turn.tool")
        assert output.get_attribute("open") is None  # folded
        output.locator("summary").click()
        assert output.locator("pre").text_content() == f"1\n{HOSTILE}"  # as text
        assert f"It is 1. {HOSTILE}" in turns.last.text_content()
        plain = page.locator(".cand[data-candidate='v/00001/plain/0']")
        assert plain.locator(".trajectory").count() == 0 and plain.locator(".text").text_content().startswith("A: 2")
