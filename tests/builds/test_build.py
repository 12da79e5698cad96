"""The spine end to end on the real GSM8K pool: a Prefect flow with Ray inside, cached re-runs, partial
invalidation, versioned export loadable by `datasets`, and SQL over every stage."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from golden_keys import assert_golden

from bonforge.cli import app
from bonforge.config import load_recipe
from bonforge.flows.build import build
from bonforge.storage.store import StageStore

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "gsm8k-genselect.yaml"
UPSTREAM = ("problems", "candidates", "verdicts")


@pytest.fixture(scope="module")
def ray_session():
    import ray

    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def runs(tmp_path_factory, gsm8k_pool, ray_session, shared_prefect):
    store = tmp_path_factory.mktemp("store")
    first = build(load_recipe(RECIPE), str(store), str(RECIPE.parent))
    again = build(load_recipe(RECIPE), str(store), str(RECIPE.parent))
    looser = build(load_recipe(RECIPE, ["filter.max_pass_rate=0.75"]), str(store), str(RECIPE.parent))
    return store, first, again, looser


def test_first_run_computes_every_stage_and_publishes_v1(runs):
    store, first, _, _ = runs
    assert first["status"] == "succeeded" and first["dataset_version"] == 1
    assert first["cached"] == {}
    assert len(first["stages"]["candidates"]) == 4 and len(first["stages"]["verdicts"]) == 4
    man = json.loads((Path(first["dataset"]) / "manifest.json").read_text())
    assert set(man["files"]) == {"verl/train.parquet", "plain/train.parquet"}
    assert man["stages"]["genselect"] == first["stages"]["genselect"]  # lineage
    assert StageStore(store).manifest("genselect", first["stages"]["genselect"][0])["prompts_dropped_too_long"] == 0


def test_every_stage_key_is_the_pinned_one(runs):
    _, first, _, looser = runs
    assert_golden("gsm8k-genselect", first)
    assert_golden("gsm8k-genselect-looser", looser)


def test_second_run_recomputes_nothing_and_reuses_the_version(runs):
    _, first, again, _ = runs
    assert again["stages"] == first["stages"]
    assert again["cached"] == again["stages"]
    assert again["dataset_version"] == 1 and again["dataset"] == first["dataset"]


def test_filter_change_reuses_upstream_and_recomputes_downstream(runs):
    _, first, _, looser = runs
    for stage in UPSTREAM:
        assert looser["stages"][stage] == first["stages"][stage]
        assert looser["cached"][stage] == first["stages"][stage]
    for stage in ("problem_stats", "genselect"):
        assert looser["stages"][stage] != first["stages"][stage]
        assert stage not in looser["cached"]
    assert looser["dataset_version"] == 2


def test_dataset_loads_with_hf_datasets(runs):
    import datasets

    _, first, _, _ = runs
    ds = datasets.load_dataset("parquet", data_files=str(Path(first["dataset"]) / "verl" / "train.parquet"),
                               split="train")
    row = ds[0]
    assert set(ds.column_names) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert row["prompt"][0]["role"] == "user" and "Judgment: <index>" in row["prompt"][0]["content"]
    assert row["reward_model"]["style"] == "rule"
    assert json.loads(row["reward_model"]["ground_truth"])  # non-empty list of correct indices


def _sql(store, query, *extra):
    res = CliRunner().invoke(app, ["sql", query, "--store", str(store), "--format", "json", *extra])
    assert res.exit_code == 0, res.output
    return [json.loads(line) for line in res.output.splitlines() if line.strip()]


def test_sql_answers_the_researchers_questions(runs):
    store, first, _, looser = runs
    acc = _sql(store, "SELECT teacher, avg(correct::INT) AS acc, count(*) AS n FROM verdicts GROUP BY teacher "
                      "ORDER BY teacher")
    assert [r["n"] for r in acc] == [1319] * 4
    assert {r["teacher"] for r in acc} == {"gpt3-6b-finetuned", "gpt3-6b-verifier", "gpt3-175b-finetuned",
                                           "gpt3-175b-verifier"}
    hist = _sql(store, "SELECT pass_rate, count(*) AS problems FROM problem_stats WHERE teacher = '*' "
                       "GROUP BY pass_rate ORDER BY pass_rate")
    assert [r["pass_rate"] for r in hist] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert sum(r["problems"] for r in hist) == 1319
    per = _sql(store, "SELECT problem_id, count(*) AS prompts FROM genselect GROUP BY problem_id")
    assert per and all(1 <= r["prompts"] <= 4 for r in per)
    # the latest run is the default; --run picks an earlier one
    looser_kept = _sql(store, "SELECT count(*) AS n FROM problem_stats WHERE teacher='*' AND keep")[0]["n"]
    first_kept = _sql(store, "SELECT count(*) AS n FROM problem_stats WHERE teacher='*' AND keep",
                      "--run", first["run_id"])[0]["n"]
    assert looser_kept > first_kept
    # our verdicts agree with the published labels (the pool's reference_correct column)
    agree = _sql(store, "SELECT count(*) FILTER (WHERE v.correct = c.reference_correct) AS same, count(*) AS n "
                        "FROM verdicts v JOIN candidates c USING (candidate_id)")[0]
    assert agree == {"same": 5276, "n": 5276}


def test_cli_runs_show_and_errors(runs):
    store = runs[0]
    res = CliRunner().invoke(app, ["runs", "--store", str(store)])
    assert res.exit_code == 0 and "succeeded" in res.output
    res = CliRunner().invoke(app, ["show", "genselect", "--limit", "2", "--store", str(store)])
    assert res.exit_code == 0 and "prompt_id" in res.output
    res = CliRunner().invoke(app, ["sql", "SELECT nope FROM verdicts", "--store", str(store)])
    assert res.exit_code == 2 and "nope" in res.output
    res = CliRunner().invoke(app, ["show", "verdictz", "--store", str(store)])
    assert res.exit_code == 2 and "unknown stage" in res.output
    res = CliRunner().invoke(app, ["show", "fusion", "--store", str(store)])  # a stage this run does not have
    assert res.exit_code == 2 and "has no stage 'fusion'" in res.output


def test_an_empty_result_is_loud_and_publishes_nothing(runs):
    """No problem passes the filter: the drop reasons and counts, no dataset version, exit code 2, unless
    the recipe allows an empty dataset (last here: it becomes the latest run)."""
    store = runs[0]
    versions = lambda: sorted(p.name for p in (store / "datasets" / "gsm8k-genselect").glob("v*"))  # noqa: E731
    before = versions()
    res = CliRunner().invoke(app, ["run", str(RECIPE), "--set", "filter.min_candidates=5", "--store", str(store)])
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1] == (
        "error: nothing to export: no problem passed the filter (dropped: too few candidates 1319); no dataset "
        "version was published (set export.allow_empty: true to publish an empty one)")
    assert versions() == before and StageStore(store).runs()[-1]["status"] == "failed"
    res = CliRunner().invoke(app, ["run", str(RECIPE), "--set", "filter.min_candidates=5", "--set",
                                   "export.allow_empty=true", "--store", str(store)])
    assert res.exit_code == 0, res.output
    assert "problems: 1319 in, 0 kept, 1319 dropped (too_few_candidates 1319)" in res.output.splitlines()
    man = json.loads((store / "datasets" / "gsm8k-genselect" / f"v{len(before) + 1}" / "manifest.json").read_text())
    assert {f["rows"] for f in man["files"].values()} == {0}
