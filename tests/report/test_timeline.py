"""Where the time went: the report's timeline (``timeline.json`` beside the HTML, what the figure is drawn
from) has a lane per resource whose intervals and busy shares are those of the build's run record, for a
barrier build and a streaming one of the same recipe (where sampling and verification overlap, and only
there)."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import datetime
from pathlib import Path

import pytest
from crash_build import LocalRun
from llm_server import ScriptedServer, adder

from bonforge.config import load_recipe
from bonforge.engine.run import StreamingRun, execute
from bonforge.flows.build import dag
from bonforge.report import write_report
from bonforge.report.timeline import lane, timeline
from bonforge.storage.run_record import RunRecord
from bonforge.storage.store import StageStore

SAMPLED = {"teachers": [{"name": "a", "engine": "openai"}, {"name": "p", "engine": "pool"}]}
POOLS = {"teachers": [{"name": "p", "engine": "pool"}]}


def record(busy: dict, recipe: dict = SAMPLED) -> RunRecord:
    return RunRecord("r1", "toy", recipe, {s: ["k"] for s in busy}, {}, "succeeded", "2026-01-01T00:00:00.000000Z",
                     wall_s=20.0, busy=busy)


T0 = datetime.fromisoformat("2026-01-01T00:00:00+00:00").timestamp()


def test_lanes_are_resources_their_stages_counted_once_where_they_overlap():
    run = record({"problems": [[T0, T0 + 1]], "candidates": [[T0 + 1, T0 + 5], [T0 + 6, T0 + 9]],
                  "verdicts": [[T0 + 4, T0 + 10]], "problem_stats": [[T0 + 10, T0 + 12]],
                  "genselect": [[T0 + 11.5, T0 + 14]], "scores": [[T0 + 2, T0 + 3]]})
    got = timeline(run, {"math"})
    assert [(x["lane"], x["stages"]) for x in got["lanes"]] == [
        ("generator", ["candidates"]), ("checkers", ["verdicts"]), ("scorer", ["scores"]),
        ("cpu", ["genselect", "problem_stats", "problems"])]
    lanes = {x["lane"]: x for x in got["lanes"]}
    assert lanes["generator"]["intervals"] == [[1, 5], [6, 9]] and lanes["generator"]["busy_s"] == 7
    assert lanes["cpu"]["intervals"] == [[0, 1], [10, 14]]  # genselect began before problem_stats ended
    assert lanes["cpu"]["busy_s"] == 5 and lanes["cpu"]["share"] == 0.25
    assert lanes["generator"]["share"] == run.busy_shares()["candidates"][1] == 0.35  # the record's share


def test_the_verification_lane_is_the_sandbox_for_code_and_a_pool_only_build_samples_nothing():
    assert lane("verdicts", SAMPLED, {"code"}) == "sandbox" and lane("verdicts", SAMPLED, {"math", "code"}) == \
        "checkers"
    assert lane("candidates", POOLS, {"math"}) == "pool import"
    assert lane("candidates", {**POOLS, "fusion": {"fusor": {}}}, {"math"}) == "generator"  # the fusor samples
    assert lane("pairwise", SAMPLED, set()) == "judge" and lane("fusion_select", SAMPLED, set()) == "selector"


def test_a_record_whose_start_cannot_be_read_counts_from_its_first_interval():
    run = dataclasses.replace(record({"candidates": [[T0 + 2, T0 + 5]], "verdicts": [[T0 + 4, T0 + 6]]}),
                              started="yesterday")
    assert [x["intervals"] for x in timeline(run, {"code"})["lanes"]] == [[[0, 3]], [[2, 4]]]


def test_a_run_without_busy_intervals_has_no_lanes():
    assert timeline(record({}), {"math"})["lanes"] == [] and timeline(
        dataclasses.replace(record({}), busy=None, wall_s=None), set())["lanes"] == []


PROBLEMS, N = 24, 4


@pytest.fixture
def recipe(tmp_path, monkeypatch) -> Path:
    """A sampled teacher over 24 problems (shards of 8) and maths verification in shards of 8 candidates, in
    process: verification can start while sampling goes on."""
    from bonforge.stages import verify

    monkeypatch.setattr(verify, "MATH", dataclasses.replace(verify.MATH, shard_rows=8, executor="local"))
    (tmp_path / "problems.jsonl").write_text("".join(
        json.dumps({"question": f"What is {i} + {2 * i}?", "answer": str(3 * i)}) + "\n" for i in range(PROBLEMS)))
    return tmp_path / "recipe.yaml"


def build_and_report(root: Path, recipe: Path, url: str, streaming: bool) -> tuple[RunRecord, dict, str]:
    recipe.write_text(f"""
name: timed
problems: {{name: toy, source: {{path: problems.jsonl}}}}
teachers:
  - {{name: a, engine: openai, model: m, base_url: "{url}", api_key_env: null, n: {N}, max_tokens: 64,
     shard_problems: 8, max_concurrency: 2, max_retries: 0}}
export: {{name: toy-genselect}}
""")
    r = load_recipe(str(recipe), [f"engine.streaming={str(streaming).lower()}"])
    store = StageStore(root)
    run = execute(dag, (StreamingRun if streaming else LocalRun)(store, r), str(recipe.parent), None, True)
    page = write_report(store, run.run_id)
    return run, json.loads((page.parent / "timeline.json").read_text()), page.read_text()


@pytest.mark.parametrize("streaming", [False, True], ids=["barrier", "streaming"])
def test_the_reports_timeline_is_the_builds_run_record(tmp_path, recipe, streaming):
    with ScriptedServer(adder("So the answer is \\boxed{{{value}}}."), delay_s=0.05) as server:
        run, spent, page = build_and_report(tmp_path / "store", recipe, server.url, streaming)
    start = datetime.fromisoformat(run.started.replace("Z", "+00:00")).timestamp()
    lanes = {x["lane"]: x for x in spent["lanes"]}
    assert list(lanes) == ["generator", "checkers", "cpu"] and spent["wall_s"] == run.wall_s
    assert lanes["cpu"]["stages"] == sorted(set(run.busy) - {"candidates", "verdicts"})
    shares = run.busy_shares()
    for name, stage in (("generator", "candidates"), ("checkers", "verdicts")):
        assert lanes[name]["stages"] == [stage]
        assert lanes[name]["intervals"] == [[round(a - start, 3), round(b - start, 3)] for a, b in run.busy[stage]]
        assert lanes[name]["busy_s"] == pytest.approx(shares[stage][0], abs=0.06)
        assert lanes[name]["share"] == pytest.approx(shares[stage][1], abs=1e-3)
    for x in spent["lanes"]:  # every interval inside the build
        assert all(0 <= a <= b <= run.wall_s for a, b in x["intervals"]) and 0 < x["share"] <= 1
    # sampling and verification overlap when streaming, and only then
    sampled, verified = lanes["generator"]["intervals"], lanes["checkers"]["intervals"]
    assert (verified[0][0] < sampled[-1][1]) == streaming, (sampled, verified)
    # the page draws it and states each lane's share
    assert re.search(r'<section id="busy_timeline" data-rows="3"><h2>Where the time went \(generator \d+%, '
                     r"checkers \d+%, cpu \d+%\)</h2>", page), page[:3000]
