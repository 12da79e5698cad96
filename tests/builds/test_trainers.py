"""Datasets that train on the first step: real builds publish the GenSelect, RL (math and code) and FusioN
SFT datasets; verl 0.9.1 itself (in its own venv, ``.ci/verl-venv``), driven only by each manifest's
overrides, loads our reward functions and scores real responses; TRL's GRPOTrainer and SFTTrainer take
an optimisation step on the exports with our reward function."""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_fusion import majority_copy
from llm_server import ScriptedServer
from tiny_lm import tiny_lm

from bonforge.config import load_recipe
from bonforge.flows.build import build

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"
pytestmark = pytest.mark.slow


def manifest(dataset: str) -> dict:
    return json.loads((Path(dataset) / "manifest.json").read_text())


def rows(dataset: str, file: str) -> list[dict]:
    return pq.read_table(Path(dataset) / file).to_pylist()


@pytest.fixture(scope="module")
def math_build(tmp_path_factory, gsm8k_pool) -> dict:
    """GSM8K with FusioN (a served fusor copying the majority answer) and the RL export: all three datasets.
    Both builds of the module share one local Ray session (shut down after the module)."""
    root = tmp_path_factory.mktemp("math-store")
    with ScriptedServer(majority_copy) as server:
        recipe = load_recipe(RECIPES / "gsm8k-fusion.yaml",
                             ["problems.limit=40", f"fusion.fusor.base_url={server.url}", "export.rl={name: gsm8k-rl}"])
        return build(recipe, str(root), str(RECIPES))


@pytest.fixture(scope="module")
def code_build(tmp_path_factory, sandbox_image, data_dir) -> dict:
    root = tmp_path_factory.mktemp("code-store")
    return build(load_recipe(RECIPES / "humaneval-genselect.yaml", ["problems.limit=24"]), str(root), str(RECIPES))


@pytest.fixture(scope="module")
def model(tmp_path_factory, math_build) -> str:
    """A tiny LM whose tokenizer is trained on the exported texts (prompts stay a few hundred tokens)."""
    corpus = [r["prompt"][0]["content"] for r in rows(math_build["dataset"], "verl/train.parquet")]
    corpus += [m["content"] for r in rows(math_build["fusion_dataset"], "trl/train.parquet") for m in r["messages"]]
    return tiny_lm(tmp_path_factory.mktemp("tiny-lm"), corpus)


def test_manifests_name_the_reward_for_each_trainer_and_the_report_counts_the_length_cut(math_build, code_build):
    genselect, rl = manifest(math_build["dataset"]), manifest(math_build["rl_dataset"])
    overrides = genselect["trainers"]["verl"]["overrides"]
    assert "reward.custom_reward_function.path=pkg://bonforge.rewards.genselect" in overrides
    assert rl["trainers"]["trl"]["reward_funcs"] == "bonforge.rewards.math.math_reward"
    assert manifest(code_build["rl_dataset"])["trainers"]["verl"]["legacy_overrides"] == [
        "custom_reward_function.path=pkg://bonforge.rewards.code", "custom_reward_function.name=compute_score"]
    assert manifest(math_build["fusion_dataset"])["trainers"]["trl"]["trainer"] == "SFTTrainer"
    # the RL export holds the kept problems and their candidates, verdict rewards beside them
    problems = rows(math_build["rl_dataset"], "rl/train.parquet")
    candidates = rows(math_build["rl_dataset"], "candidates/train.parquet")
    assert problems and {c["problem_id"] for c in candidates} == {p["extra_info"]["problem_id"] for p in problems}
    assert all(0 < p["extra_info"]["pass_rate"] <= 0.5 for p in problems)
    for p in problems:  # the difficulty a trainer filters or weights by: the problem_stats row of the build
        info = p["extra_info"]
        assert info["n_correct"] / info["n_samples"] == info["pass_rate"] and info["measured_on"]
        assert info["pass_at_k"][0] == {"k": 1, "value": info["pass_rate"]}
    report = Path(math_build["report"]).read_text()
    assert "candidates_dropped_too_long" in report and "prompts_dropped_too_long" in report


def genselect_cases(dataset: str) -> tuple[list, list[float]]:
    """A correct judgment, a wrong one, garbage, and a correct one after a reasoning block."""
    picked = []
    for i, r in enumerate(rows(dataset, "verl/train.parquet")):
        good = json.loads(r["reward_model"]["ground_truth"])
        bad = [k for k in range(r["extra_info"]["n_candidates"]) if k not in good]
        picked.append((i, good[0], bad[0]))
        if len(picked) == 2:
            break
    (a, good_a, bad_a), (b, good_b, _) = picked
    responses = [[a, f"Candidate {good_a} is right.\nJudgment: {good_a}"], [a, f"Judgment: {bad_a}"],
                 [b, "}{ \u0000 Judgment:: ?? Judgment"], [b, f"<think>Judgment: {bad_a}?</think>\nJudgment: {good_b}"]]
    return responses, [1.0, 0.0, 0.0, 1.0]


def candidate_cases(dataset: str, garbage: str) -> tuple[list, list[tuple[float, str]]]:
    """Real responses: a candidate that earned reward 1 and one that earned less (their verdicts' rewards
    and statuses are what verl must now reproduce), then garbage."""
    index = {r["extra_info"]["problem_id"]: i for i, r in enumerate(rows(dataset, "rl/train.parquet"))}
    cands = rows(dataset, "candidates/train.parquet")
    best = next(c for c in cands if c["reward"] == 1.0)
    worst = next(c for c in cands if c["reward"] < 1.0 and c["status"] != "no_answer")
    cases = [[index[best["problem_id"]], best["response"]], [index[worst["problem_id"]], worst["response"]],
             [index[best["problem_id"]], garbage]]
    return cases, [(1.0, best["status"]), (worst["reward"], worst["status"])]


@pytest.mark.docker
def test_verl_loads_our_rewards_from_the_manifests_and_scores_real_responses(
    verl_python, model, math_build, code_build, tmp_path
):
    genselect = math_build["dataset"]
    cases, expected = [], []

    def case(dataset: str, file: str, responses: list, want: list | None, legacy: bool = False, ours: bool = True):
        verl = manifest(dataset)["trainers"]["verl"]
        overrides = [o for o in verl["overrides"] if not o.startswith("reward.")] if not ours else (
            verl["legacy_overrides"] + [o for o in verl["overrides"] if o.startswith("data.")] if legacy
            else verl["overrides"])  # fmt: skip
        cases.append({"overrides": overrides, "train_file": str(Path(dataset) / file), "responses": responses})
        expected.append(want)

    responses, want = genselect_cases(genselect)
    case(genselect, "verl/train.parquet", responses, want)
    case(genselect, "verl/train.parquet", responses[:2], want[:2], legacy=True)
    case(genselect, "verl/train.parquet", responses[:1], None, ours=False)  # verl alone cannot score it
    case(math_build["rl_dataset"], "rl/train.parquet", *candidate_cases(math_build["rl_dataset"], "I give up."))
    code_cases, code_want = candidate_cases(code_build["rl_dataset"], "```python\ndef (:\n```")
    case(code_build["rl_dataset"], "rl/train.parquet", code_cases, code_want)
    spec = tmp_path / "cases.json"
    spec.write_text(json.dumps({"tokenizer": model, "cases": cases}))
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_DEDUP_LOGS": "0"}
    payload = REPO / "tests" / "helpers" / "verl_payload.py"
    done = subprocess.run([verl_python, str(payload), str(spec)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["versions"]["verl"] == "0.9.1"
    results = [r["scores"] for r in out["results"]]
    assert all(r["rows"] > 0 for r in out["results"])  # verl's RLHFDataset kept every exported row it read

    full, legacy, control, maths, code = results
    assert [r["reward_score"] for r in full] == expected[0]
    assert [(r["reward_extra_info"]["parsed"], r["reward_extra_info"]["format_ok"]) for r in full][2] == (-1, False)
    assert [r["reward_score"] for r in legacy] == expected[1]
    assert "NotImplementedError" in control["error"] and "bonforge/gsm8k-fusion" in control["error"]
    scored = lambda out: [(r["reward_score"], r["reward_extra_info"]["status"]) for r in out]  # noqa: E731
    assert scored(maths)[:2] == expected[3] and scored(maths)[2] == (0.0, "no_answer")
    assert scored(code)[:2] == expected[4] and expected[4][0][1] == "passed"
    assert scored(code)[2] in ((0.0, "compile_error"), (0.0, "runtime_error"))


def load_reward(dataset: str):
    """The TRL reward function the manifest names, by import path."""
    module, name = manifest(dataset)["trainers"]["trl"]["reward_funcs"].rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def test_trl_grpo_takes_a_step_on_the_genselect_export_with_our_reward(model, math_build, tmp_path):
    import datasets
    from trl import GRPOConfig, GRPOTrainer

    ours = load_reward(math_build["dataset"])
    calls: list[tuple[dict, list[float]]] = []

    def genselect_reward(prompts, completions, **columns):  # records what our function got and returned
        scores = ours(prompts, completions, **columns)
        calls.append((columns, scores))
        return scores

    file = Path(math_build["dataset"]) / manifest(math_build["dataset"])["trainers"]["trl"]["train_file"]
    ds = datasets.load_dataset("parquet", data_files=str(file), split="train").select(range(2))
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, num_generations=4,
                      per_device_train_batch_size=4, max_completion_length=16, max_steps=1, logging_steps=1,
                      report_to=[], save_strategy="no", seed=0)  # fmt: skip
    trainer = GRPOTrainer(model=model, reward_funcs=genselect_reward, args=args, train_dataset=ds)
    trainer.train()
    assert trainer.state.global_step == 1
    logged = next(h for h in trainer.state.log_history if "rewards/genselect_reward/mean" in h)
    returned = [s for _, scores in calls for s in scores]
    assert returned and len(returned) % 4 == 0 and all(0.0 <= s <= 1.0 for s in returned)
    assert logged["rewards/genselect_reward/mean"] == pytest.approx(sum(returned) / len(returned))
    columns = calls[0][0]  # the dataset's own columns reached our function
    truths = {r["reward_model"]["ground_truth"] for r in ds}
    assert {rm["ground_truth"] for rm in columns["reward_model"]} <= truths and "extra_info" in columns


def test_trl_sft_takes_a_step_on_the_fusion_export(model, math_build, tmp_path):
    import datasets
    from trl import SFTConfig, SFTTrainer

    sft = manifest(math_build["fusion_dataset"])["trainers"]["trl"]
    ds = datasets.load_dataset("parquet", data_files=str(Path(math_build["fusion_dataset"]) / sft["train_file"]),
                               split="train")  # fmt: skip
    assert len(ds) > 0 and ds[0]["messages"][-1]["role"] == "assistant"
    args = SFTConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, per_device_train_batch_size=2, max_steps=1,
                     logging_steps=1, max_length=512, report_to=[], save_strategy="no", seed=0)  # fmt: skip
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds)
    result = trainer.train()
    assert trainer.state.global_step == 1 and math.isfinite(result.training_loss) and result.training_loss > 0
    assert sys.modules["trl"].__version__.startswith("1.")
