"""Teacher models: validation at load, execution-only fields out of keys, recipes with several engines."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bonforge.config import Recipe, format_validation_error
from bonforge.llm.config import OpenAITeacher, TransformersTeacher, VLLMTeacher

RECIPE = {"name": "r", "problems": {"source": {"path": "x.jsonl"}, "name": "g"}, "export": {"name": "d"}}


def test_a_recipe_names_teachers_across_engines():
    recipe = Recipe.model_validate({**RECIPE, "teachers": [
        {"engine": "vllm", "name": "qwen3-1.7b", "model": "Qwen/Qwen3-1.7B", "n": 16, "max_tokens": 8192},
        {"engine": "openai", "name": "hosted", "model": "gpt-x", "base_url": "http://h/v1"},
        {"engine": "transformers", "name": "tiny", "model": "/models/tiny"},
    ]})
    assert [type(t) for t in recipe.teachers] == [VLLMTeacher, OpenAITeacher, TransformersTeacher]
    assert recipe.teachers[0].n == 16


def test_key_config_leaves_out_execution_settings():
    a = OpenAITeacher(engine="openai", name="t", model="m", base_url="http://a/v1", max_concurrency=4)
    b = OpenAITeacher(engine="openai", name="t", model="m", base_url="http://b/v1", max_concurrency=64,
                      timeout_s=5, max_retries=0, requests_per_minute=10, api_key_env=None, shard_problems=3)
    assert a.key_config() == b.key_config()
    assert "base_url" not in a.key_config() and "max_concurrency" not in a.key_config()
    assert a.key_config() != a.model_copy(update={"temperature": 1.0}).key_config()
    v = VLLMTeacher(engine="vllm", name="q", model="m")
    assert v.key_config() == v.model_copy(update={"tensor_parallel_size": 4, "num_replicas": 2}).key_config()


@pytest.mark.parametrize("field, value, message", [
    ("n", 0, "n: Input should be greater than 0"),
    ("temperature", -1, "temperature: Input should be greater than or equal to 0"),
    ("top_p", 1.5, "top_p: Input should be less than or equal to 1"),
    ("max_concurrency", 0, "max_concurrency: Input should be greater than 0"),
    ("name", "a b", "name: a name must be 1 to 100 letters, digits"),
])
def test_bad_values_fail_at_load_naming_the_field(field, value, message):
    teacher = {"engine": "openai", "name": "t", "model": "m", field: value}
    with pytest.raises(ValidationError) as info:
        Recipe.model_validate({**RECIPE, "teachers": [teacher]})
    assert message in format_validation_error(info.value, "recipe.yaml")


def test_misspelled_teacher_field_suggests_the_right_one():
    with pytest.raises(ValidationError) as info:
        Recipe.model_validate({**RECIPE, "teachers": [{"engine": "vllm", "name": "q", "model": "m", "temprature": 1}]})
    assert "unknown field; did you mean 'temperature'?" in format_validation_error(info.value, "recipe.yaml")
