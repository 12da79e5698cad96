"""Every shipped recipe validates, and the new recipes say what the issue asks of them."""

from __future__ import annotations

import re
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


# -- names and recipe text, as a hostile recipe writes them -------------------------------------------------
GSM8K = RECIPES / "gsm8k-genselect.yaml"
FUSION = RECIPES / "gsm8k-fusion.yaml"


def one_line(err) -> str:
    message = str(err.value)
    assert "\n" not in message and len(message) < 800, message
    return message


@pytest.mark.parametrize("field", ["export.name", "export.rl.name", "name", "teachers.0.name"])
@pytest.mark.parametrize("value", ["'.'", "'..'", "x" * 300, "a/b", "'../../etc'", "'x\\0'", "dé", ".hidden",
                                   "'-x'", "'a b'"], ids=["dot", "dotdot", "300", "slash", "up", "nul", "unicode",
                                                          "hidden", "option", "space"])
def test_a_name_that_would_leave_datasets_is_refused_before_any_work(field, value):
    from bonforge.errors import ConfigError

    with pytest.raises(ConfigError, match=rf"invalid recipe: {field.replace('.', '[.]')}: a name must be 1 to 100 "
                                          "letters, digits"):
        load_recipe(GSM8K, [f"{field}={value}"])


def test_names_at_the_limit_are_taken():
    r = load_recipe(GSM8K, ["export.name=" + "a" * 100, "export.rl.name=a..b", "teachers.0.name=T.1_x-2"])
    assert (r.export.name, r.export.rl.name, r.teachers[0].name) == ("a" * 100, "a..b", "T.1_x-2")


def test_each_published_dataset_has_its_own_folder():
    from bonforge.errors import ConfigError

    fusion = load_recipe(FUSION)
    main = fusion.export.name
    with pytest.raises(ConfigError, match=rf"fusion\.export\.name '{main}' is the dataset export\.name publishes"):
        load_recipe(FUSION, [f"fusion.export.name={main}"])
    with pytest.raises(ConfigError, match=r"fusion\.export\.name '.*' is the dataset export\.name publishes \(names "
                                          "that differ only in case"):
        load_recipe(FUSION, [f"fusion.export.name={main.upper()}"])
    with pytest.raises(ConfigError, match=r"fusion\.export\.name 'rl' is the dataset export\.rl\.name publishes"):
        load_recipe(FUSION, ["export.rl.name=rl", "fusion.export.name=rl"])
    assert load_recipe(FUSION, ["export.rl.name=rl"]).fusion.export.name == fusion.fusion.export.name  # control


@pytest.mark.parametrize("text, match", [
    (b"\xff\xfe", r"r\.yaml: line 1: byte 0xff is not UTF-8 text"),
    ("a: " + "[" * 5000 + "]" * 5000, r"r\.yaml: line 1, column 67: nested more than 64 levels deep"),
    ("name: x\nname: y\n", r"r\.yaml: line 2, column 1: key 'name' given twice \(first on line 1\)"),
    ("name: [x\nseed: 1\n", r"r\.yaml: line 2, column 5: expected ',' or '\]', but got ':'"),
    ("seed: " + "9" * 5000, r"r\.yaml: line 1, column 7: integer '9+\.\.\. \(5,000 characters\) does not fit"),
], ids=["utf8", "deep", "twice", "broken", "huge-int"])  # fmt: skip
def test_broken_recipe_text_is_one_line_naming_file_line_and_column(tmp_path, text, match):
    from bonforge.errors import ConfigError

    path = tmp_path / "r.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError) as err:
        load_recipe(path)
    assert re.match(match, one_line(err).removeprefix(f"{tmp_path}/")), str(err.value)


@pytest.mark.parametrize("override, match", [
    ("seed=[1", r"--set 'seed': line 1, column 3: expected ',' or '\]'"),
    ("seed={a: 1, a: 2}", r"--set 'seed': line 1, column 8: key 'a' given twice"),
    ("seed=" + "9" * 5000, r"--set 'seed': line 1, column 1: integer '9+\.\.\. \(5,000 characters\)"),
    ("seed=1\0", r"--set 'seed': line 1, column 2: character #x0000 is not allowed"),
    ("filter.max_pass_rate=.inf", r"filter\.max_pass_rate: Input should be a finite number"),
    ("filter.max_pass_rate = 0.3", r"--set 'filter\.max_pass_rate = 0\.3': expected KEY\.PATH=VALUE with no space "
                                   "around '='"),
    ("filter.max_pass_rate= 0.3", "no space around '='"),
    ("filter.max_pass_rate =0.3", "no space around '='"),
    ("filter..max_pass_rate=0.3", "no space around '=' or in the key"),
    ("teachers.٣.n=1", r"--set 'teachers\.٣': '٣' is not an index of a list of 4"),
    ("a." * 10_000 + "a=1", r"--set 'a\.a\.a.*\(20,001 characters\): a key path of 10001 parts"),
    ("seed=!!python/object/apply:os.system [echo hi]", r"--set 'seed': line 1, column 1: could not determine a "
                                                        "constructor for the tag"),
    ("export.name=" + "x" * 2_000_000, r"export\.name: a name must .* not 'x+\.\.\. \(2,000,000 characters\)$"),
    ("filter." + "k" * 2_000_000 + "=1", r"invalid recipe: filter\.k+\.\.\.: unknown field; allowed: min_pass_rate"),
    ("fusion={teachers: {? " + "t" * 2_000_000 + " : 1}, fusor: {engine: openai, name: f, model: m}, "
     "export: {name: fx}}",
     r"invalid recipe: fusion\.teachers: unknown teacher t+\.\.\.$"),
    ("genselect.max_tokens='" + "y" * 2_000_000 + "'",
     r"genselect\.max_tokens: Input should be a valid integer, .* \(got 'y+\.\.\. \(2,000,000 characters\)\)$"),
    ("teachers.0.name.x=1", r"--set 'teachers\.0\.name\.x': 'teachers\.0\.name' is a str, not a mapping or a list"),
    ("seed.x=1", r"--set 'seed\.x': 'seed' is a int, not a mapping or a list"),
], ids=["broken", "twice", "huge-int", "nul", "inf", "spaces", "space-after", "space-before", "empty-part", "digit",
        "deep-key", "python-tag", "2mb-name", "2mb-key", "2mb-teacher", "2mb-value", "into-a-string",
        "into-a-number"])  # fmt: skip
def test_a_bad_override_is_one_short_line(override, match):
    from bonforge.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        load_recipe(GSM8K, [override])
    assert re.search(match, one_line(err)), str(err.value)


def test_an_override_without_spaces_is_applied():
    r = load_recipe(GSM8K, ["filter.max_pass_rate=0.3", "export.name=my-set", "teachers.gpt3-6b-finetuned.n=4"])
    assert (r.filter.max_pass_rate, r.export.name, r.teachers[0].n) == (0.3, "my-set", 4)
