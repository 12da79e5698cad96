"""Every shipped recipe validates, and the new recipes say what the issue asks of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from bonforge.config import VLLMTeacher, load_recipe

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.stem)
def test_recipe_validates(path):
    load_recipe(path)


@pytest.mark.parametrize("name", ["openmathreasoning-genselect", "opencodereasoning-genselect"])
def test_seed_recipes(name):
    r = load_recipe(RECIPES / f"{name}.yaml")
    (t,) = r.teachers
    assert isinstance(t, VLLMTeacher) and t.model == "Qwen/Qwen3-1.7B" and t.n == 16 and t.max_tokens == 12288
    assert r.filter.max_pass_rate < 0.5 and r.genselect.prompts_per_problem == 4 and r.genselect.max_tokens == 16384
    wanted = {"aime24", "aime25", "math500"} if "math" in name else {"livecodebench"}
    assert {b.name for b in r.decontaminate.benchmarks} == wanted and r.decontaminate.dedup


@pytest.mark.parametrize("problems, message", [
    ({"format": "problem_package", "domain": "math"}, "format: problem_package holds code problems"),
    ({"format": "jsonl", "domain": "code", "fields": {"tests": "t", "solution_languages": "solutions.language"}},
     "fields.solution_languages needs fields.solutions"),
])  # fmt: skip
def test_problem_package_and_solution_languages_rules(problems, message):
    from bonforge.config import FilterConfig, ProblemsConfig

    with pytest.raises(ValueError, match=message):
        ProblemsConfig(source={"path": "x"}, name="n", **problems)
    with pytest.raises(ValueError, match="less than or equal to 1"):
        FilterConfig(min_suite_strength=1.5)
    assert "min_suite_strength" not in FilterConfig().key_config()  # off by default: old keys stay
