"""``--recipe NAME`` wherever ``--run`` is taken: the latest run of that recipe, not the latest of any recipe
(``StageStore.run``, the one resolver the commands, the viewer and the Python API share)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from typer.testing import CliRunner
from viewer_helpers import PROBLEMS, small_store

from bonforge.cli import app
from bonforge.errors import StoreError
from bonforge.storage.run_record import RunRecord


@pytest.fixture
def two_recipes(tmp_path):
    """A store with a run of recipe ``small`` (6 problems) and, later, a run of recipe ``other`` (2)."""
    store, _ = small_store(tmp_path / "store")
    store.write_shard("problems", "kp2", 0, pa.table({"problem_id": ["q0", "q1"], "question": ["a", "b"]}))
    store.commit("problems", "kp2", 1, version="1", config={}, upstream={})
    store.record_run(RunRecord.from_json({"run_id": "run2", "recipe_name": "other", "status": "succeeded",
                                          "started": "2026-01-02T00:00:00Z", "stages": {"problems": ["kp2"]}}))
    return store


def _count(store, *args) -> int:
    res = CliRunner().invoke(app, ["sql", "SELECT count(*) AS n FROM problems", "--format", "json",
                                   "--store", str(store.root), *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)["n"]


def test_the_resolver_takes_the_latest_run_of_a_recipe(two_recipes):
    store = two_recipes
    assert store.run()["run_id"] == "run2"
    assert store.run(recipe="small")["run_id"] == "run1"
    assert store.run("run", recipe="small")["run_id"] == "run1"  # a prefix, among that recipe's runs only
    with pytest.raises(StoreError, match=r"no run of recipe 'gsm8k' in .*; its runs are of other, small"):
        store.run(recipe="gsm8k")
    with pytest.raises(StoreError, match="no run 'run2' of recipe 'small'"):
        store.run("run2", recipe="small")


def test_sql_show_and_runs_take_recipe(two_recipes):
    store = two_recipes
    assert _count(store) == 2  # the latest run, of recipe `other`
    assert _count(store, "--recipe", "small") == PROBLEMS
    assert _count(store, "--recipe", "other") == 2
    res = CliRunner().invoke(app, ["show", "problems", "--recipe", "small", "--limit", "50",
                                   "--store", str(store.root)])
    assert res.exit_code == 0 and "p5" in res.output and "q0" not in res.output
    res = CliRunner().invoke(app, ["runs", "--recipe", "small", "--store", str(store.root)])
    assert res.exit_code == 0 and "kp" in res.output and "kp2" not in res.output


@pytest.mark.parametrize("command", [["sql", "SELECT 1"], ["show", "problems"], ["runs"], ["view"], ["report"],
                                     ["maxk"]])
def test_an_unknown_recipe_is_one_error_line(two_recipes, command):
    res = CliRunner().invoke(app, [*command, "--recipe", "gsm8k", "--store", str(two_recipes.root)])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == [
        f"error: no run of recipe 'gsm8k' in {two_recipes.root}; its runs are of other, small"]


@pytest.mark.parametrize("command", [["sql", "SELECT 1", "--run"], ["show", "problems", "--run"], ["runs", "--run"],
                                     ["view", "--run"], ["report"], ["maxk"]])
def test_an_ambiguous_run_id_prefix_is_refused_naming_the_runs(two_recipes, command):
    """``run`` begins both ``run1`` and ``run2``: it was the oldest of them; now no command guesses."""
    res = CliRunner().invoke(app, [*command, "run", "--store", str(two_recipes.root)])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == ["error: run id prefix 'run' names 2 runs (run1, run2): give more of "
                                               "the id"]


def test_a_prefix_of_one_run_and_a_whole_id_that_begins_another_are_taken(two_recipes):
    store = two_recipes
    assert store.run("run2")["run_id"] == "run2" and store.run("run1")["run_id"] == "run1"
    store.record_run(RunRecord.from_json({"run_id": "run1-b", "recipe_name": "small", "status": "succeeded",
                                          "started": "2026-01-03T00:00:00Z", "stages": {}}))
    assert store.run("run1")["run_id"] == "run1"  # a whole id wins over the ids it begins
    assert store.run("run1-")["run_id"] == "run1-b"
    with pytest.raises(StoreError, match=r"no run '' in"):
        store.run("")  # an empty prefix names no run (it took the oldest)
    for i in range(7):
        store.record_run(RunRecord.from_json({"run_id": f"many{i}", "recipe_name": "small", "status": "succeeded",
                                              "started": f"2026-01-04T00:00:0{i}Z", "stages": {}}))
    with pytest.raises(StoreError, match=r"^run id prefix 'many' names 7 runs \(the newest: many2, many3, many4, "
                                         r"many5, many6\): give more of the id$"):
        store.run("many")
