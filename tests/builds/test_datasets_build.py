"""What a build publishes, as a training job meets it: two GSM8K builds (filter at 0.5, then 0.75 by `--set`)
with the reference solutions in the pool, a validation split and the RL export. Each version says what made
it, loads by its card, splits by problem; `latest` and `bonforge datasets` name the versions; the references
neither count in the filter nor enter GenSelect prompts; the RL ground truth is the gold final answer."""

import json
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.config import load_recipe
from bonforge.flows.build import build
from bonforge.storage.store import StageStore

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "gsm8k-genselect.yaml"
SETTINGS = ["problems.limit=60", "problems.include_reference=true", "export.validation_fraction=0.3",
            "export.license=mit"]


@pytest.fixture(scope="module")
def builds(tmp_path_factory, gsm8k_pool, shared_prefect):
    store = tmp_path_factory.mktemp("store")
    first = build(load_recipe(RECIPE, SETTINGS), str(store), str(RECIPE.parent))
    looser = build(load_recipe(RECIPE, SETTINGS + ["filter.max_pass_rate=0.75"]), str(store), str(RECIPE.parent))
    return store, first, looser


def _manifest(record) -> dict:
    return json.loads((Path(record["dataset"]) / "manifest.json").read_text())


def test_each_version_says_what_made_it(builds):
    _, first, looser = builds
    v1, v2 = _manifest(first), _manifest(looser)
    assert (v1["version"], v2["version"]) == (1, 2)
    assert v1["overrides"] == SETTINGS and v2["overrides"] == SETTINGS + ["filter.max_pass_rate=0.75"]
    assert (v1["resolved_recipe"]["filter"]["max_pass_rate"], v2["resolved_recipe"]["filter"]["max_pass_rate"]) == (
        0.5, 0.75)
    assert v1["stages"]["problem_stats"] != v2["stages"]["problem_stats"]
    assert v1["stages"] == {k: v for k, v in first["stages"].items() if k in v1["stages"]}
    assert v1["bonforge_version"] and v1["recipe"] == "gsm8k-genselect"
    roles = {s["role"]: s["content"] for s in v1["sources"]}
    assert roles["problems"] == {"sha256": "4bc62db838f8418365d51c627bd66294cbdca9fb7f01519cb13f0dce8c51580b"}
    assert len(roles) == 5  # the problems and the four pool teachers' file (the references have none)
    s1, s2 = v1["summary"], v2["summary"]
    assert s1["problems"] == 60 and s1["kept"] + sum(s1["dropped"].values()) == 60
    assert set(s1["dropped"]) <= {"too_easy", "too_hard"} and s2["kept"] > s1["kept"]
    assert s1["candidates"] == 60 * 5 and sum(s1["verdicts"].values()) == 60 * 5  # four teachers and the reference


def test_a_version_loads_by_its_card_split_by_problem(builds):
    import datasets

    _, _, looser = builds
    folder = Path(looser["dataset"])
    ds = datasets.load_dataset(str(folder))
    assert set(ds) == {"train", "validation"} and ds["validation"].num_rows > 0
    split = {s: {r["problem_id"] for r in ds[s]["extra_info"]} for s in ds}
    assert not split["train"] & split["validation"]
    card = (folder / "README.md").read_text()
    assert "license: mit" in card and "filter.max_pass_rate=0.75" in card


def test_reference_solutions_neither_count_in_the_filter_nor_enter_prompts(builds):
    """On GSM8K each problem has one reference (its gold solution, judged correct): counted, a problem the four
    GPT-3 teachers all got wrong had pass rate 1/5 = 0.2 and was kept."""
    store, first, _ = builds
    st = StageStore(store)
    stats = st.read("problem_stats", first["stages"]["problem_stats"][0])
    star = stats.filter(pc.equal(stats["teacher"], "*")).to_pylist()
    refs = {r["problem_id"]: r for r in stats.filter(pc.equal(stats["teacher"], "reference")).to_pylist()}
    assert len(star) == len(refs) == 60 and all(r["n"] == 4 for r in star)  # the model's four, not five
    unsolved = [r for r in star if r["n_correct"] == 0]
    assert unsolved and all(refs[r["problem_id"]]["n_correct"] == 1 for r in unsolved)  # the case
    assert all(not r["keep"] and r["drop_reason"] == "too_hard" for r in unsolved)
    genselect = st.read("genselect", first["stages"]["genselect"][0])
    ids = pc.list_flatten(genselect["candidate_ids"]).to_pylist()
    assert ids and not [i for i in ids if "/reference/" in i]


def test_the_rl_ground_truth_is_the_gold_final_answer(builds):
    _, first, _ = builds
    rl = pq.read_table(Path(first["rl_dataset"]) / "rl" / "train.parquet").to_pylist()
    assert rl
    for row in rl:
        truth, solution = row["reward_model"]["ground_truth"], row["extra_info"]["solution"]
        assert "\n" not in truth and solution.rstrip().endswith(f"A: {truth}")
        assert row["extra_info"]["n_samples"] == 4 and "reference" not in row["extra_info"]["measured_on"]


def test_latest_and_the_datasets_command(builds):
    store, _, looser = builds
    assert (Path(store) / "datasets" / "gsm8k-genselect" / "latest" / "verl" / "validation.parquet").is_file()
    out = CliRunner().invoke(app, ["datasets", "--store", str(store)])
    assert out.exit_code == 0, out.output
    lines = [line.split() for line in out.output.splitlines()]
    assert lines[0][:2] == ["name", "version"]
    assert [line[:3] for line in lines[1:] if "latest" in line] == [["gsm8k-genselect", "v2", "latest"],
                                                                     ["gsm8k-rl", "v2", "latest"]]
    assert [line[:2] for line in lines[1:]] == [["gsm8k-genselect", "v2"], ["gsm8k-genselect", "v1"],
                                                ["gsm8k-rl", "v2"], ["gsm8k-rl", "v1"]]
    as_json = json.loads(CliRunner().invoke(app, ["datasets", "gsm8k-genselect", "--store", str(store),
                                                   "--format", "json"]).output)
    assert [(r["version"], r["latest"], r["config"]) for r in as_json] == [(2, True, "verl"), (1, False, "verl")]
    assert as_json[0]["path"] == looser["dataset"] and set(as_json[0]["rows"]) == {"train", "validation"}
