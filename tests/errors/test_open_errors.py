"""Bad open-ended recipes fail at load, before any work, with one line naming the field."""

from pathlib import Path

import pytest

from bonforge.config import load_recipe
from bonforge.errors import ConfigError

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "arena-hard-bon.yaml"


@pytest.mark.parametrize("overrides, message", [
    (["scorers.rm.model="], r"scorers\.1\.model: Input should be a valid string"),
    (["scorers=[{name: rm, kind: reward_model}]"], r"scorers\.0\.model: Field required"),
    (["scorers.lang.kind=bertscore"], r"scorers\.0: Input tag 'bertscore' found using 'kind' does not match"),
    (["bon.scorer=judge"], r"bon\.scorer: no scorer named 'judge' \(scorers: lang, rm\)"),
    (["bon.filter.language=rm"], r"bon\.filter\.language: scorer 'rm' is not a language_id one"),
    (["bon.filter.min={bleu: 3}"], r"bon\.filter\.min: no scorer named 'bleu'"),
    (["scorers.rm.engine=pooling"], r"base_url is needed by engine pooling"),
    (["bon=null"], r"need scorers and bon"),
    (["problems.domain=math"], r"scorers, bon and evaluate apply to open-ended problems"),
    (["scorers=[{name: a, kind: language_id}, {name: a, kind: language_id}]"], r"scorers: names must be unique"),
])
def test_bad_open_recipe_is_one_error_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_recipe(RECIPE, overrides)
    assert "\n" not in str(err.value)


def test_a_judge_template_without_its_placeholders(tmp_path):
    bad = tmp_path / "judge.txt"
    bad.write_text("Rate this: {question}")
    judge = f"{{name: j, kind: judge, template: {bad}, judge: {{name: j, engine: openai, model: m}}}}"
    with pytest.raises(ConfigError, match=r"^scorers\.j\.template: .*judge\.txt has no \{answer\} placeholder$"):
        load_recipe(RECIPE, [f"scorers=[{judge}]", "bon.scorer=j", "bon.filter.language=null"])


JUDGE = "{name: arbiter, engine: openai, model: arbiter}"


@pytest.mark.parametrize("evaluate, message", [
    (f"{{judge: {JUDGE}}}", r"evaluate\.baseline: Field required"),
    (f"{{judge: {JUDGE}, baseline: gpt-4-0314}}", r"evaluate\.baseline: 'gpt-4-0314' is not `bon` or `teacher:<name>`"),
    (f"{{judge: {JUDGE}, baseline: 'teacher:gpt-5'}}", r"evaluate\.baseline: 'teacher:gpt-5' is not"),
    (f"{{judge: {JUDGE}, baseline: 'teacher:gpt-4-0314', contenders: ['teacher:gpt-4-0314']}}",
     r"evaluate\.contenders: at least one that is not a baseline"),
    (f"{{judge: {JUDGE}, baseline: 'teacher:gpt-4-0314', contenders: [fused]}}",
     r"evaluate\.contenders: 'fused' is not `bon` or `teacher:<name>`"),  # no fusion section
    (f"{{judge: {JUDGE}, baseline: ['teacher:gpt-4-0314', bon, bon]}}", r"each contender and each baseline once"),
    (f"{{judge: {JUDGE}, baseline: 'teacher:gpt-4-0314', contenders: [best]}}", r"evaluate\.contenders: 'best'"),
])
def test_bad_evaluation_is_one_error_line(evaluate, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_recipe(RECIPE, [f"evaluate={evaluate}"])
    assert "\n" not in str(err.value)


def test_the_judge_that_picked_may_not_grade_its_picks():
    picker = f"{{name: j, kind: judge, judge: {JUDGE}}}"
    with pytest.raises(ConfigError, match=r"evaluate\.judge: model 'arbiter' is the judge that picked"):
        load_recipe(RECIPE, [f"scorers=[{picker}]", "bon.scorer=j", "bon.filter.language=null",
                             f"evaluate={{judge: {JUDGE}, baseline: 'teacher:gpt-4-0314'}}"])


FUSION = "fusion={teachers: {gpt-4-0314: 1}, fusor: {name: f, engine: openai, model: m}, export: {name: fused}}"


@pytest.mark.parametrize("extra, message", [
    ("fusion.export.only_correct=false", r"fusion\.export\.only_correct read verdicts"),
    ("fusion.prefilter.drop_statuses=[no_answer]", r"fusion\.prefilter\.drop_statuses, fusion\.selector"),
    ("fusion.teachers={gpt-5: 1}", r"fusion\.teachers: unknown teacher gpt-5"),
    ("fusion.problems=kept", r"fusion\.problems: kept and"),
    ("fusion.selector={name: s, engine: openai, model: m}", r"fusion\.selector, fusion\.problems"),
])
def test_bad_open_fusion_is_one_error_line(extra, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_recipe(RECIPE, [FUSION, extra])
    assert "\n" not in str(err.value)


def test_the_judge_that_filtered_the_pools_may_not_grade_the_fused_answers():
    """A judge scorer in the hard filter chose which answers the fusor saw: it may not judge fused answers."""
    rater = f"{{name: j, kind: judge, judge: {JUDGE}}}"
    picked = r"evaluate\.judge: model 'arbiter' is the judge that picked .* \(scorer 'j'\)"
    with pytest.raises(ConfigError, match=picked):
        load_recipe(RECIPE, [f"scorers=[{{name: lang, kind: language_id}}, {rater}]", "bon.scorer=lang",
                             "bon.filter.min={j: 3}", FUSION,
                             f"evaluate={{judge: {JUDGE}, baseline: 'teacher:gpt-4-0314', contenders: [fused]}}"])
    ok = load_recipe(RECIPE, [f"scorers=[{{name: lang, kind: language_id}}, {rater}]", "bon.scorer=lang", FUSION,
                              f"evaluate={{judge: {JUDGE}, baseline: 'teacher:gpt-4-0314', contenders: [fused, bon]}}"])
    assert ok.evaluate.baselines == ["teacher:gpt-4-0314"]  # a judge scorer that selects nothing may judge
