"""The wording of user-facing errors: each names the field path or the record and field."""

from pathlib import Path

import pytest
import yaml

from bonforge.config import DataSource, FieldMap, ProblemsConfig, load_recipe
from bonforge.sources.data import resolve
from bonforge.errors import ConfigError, DataError, FetchError
from bonforge.stages.load import load_problems

REPO = Path(__file__).resolve().parents[2]
GSM8K = REPO / "recipes" / "gsm8k-genselect.yaml"


def write(tmp_path, raw) -> Path:
    p = tmp_path / "r.yaml"
    p.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw))
    return p


def base() -> dict:
    return yaml.safe_load(GSM8K.read_text())


def test_shipped_recipe_is_valid():
    r = load_recipe(GSM8K)
    assert [t.name for t in r.teachers][:1] == ["gpt3-6b-finetuned"] and r.filter.max_pass_rate == 0.5


def test_unknown_key_names_path_and_suggests(tmp_path):
    raw = base()
    raw["filter"]["max_pas_rate"] = 0.6
    with pytest.raises(ConfigError, match=r"filter\.max_pas_rate: unknown field; did you mean 'max_pass_rate'\?"):
        load_recipe(write(tmp_path, raw))


def test_bad_value_names_path_and_value(tmp_path):
    with pytest.raises(ConfigError, match=r"genselect\.max_tokens: .*greater than 0 \(got -5\)"):
        load_recipe(GSM8K, ["genselect.max_tokens=-5"])


def test_bad_teacher_field_names_its_index(tmp_path):
    with pytest.raises(ConfigError, match=r"teachers\.1\.n: .*greater than 0"):
        load_recipe(GSM8K, ["teachers.1.n=0"])


def test_cross_field_rule_fires():
    with pytest.raises(ConfigError, match="min_pass_rate .* must be below max_pass_rate"):
        load_recipe(GSM8K, ["filter.min_pass_rate=0.6"])


def test_early_stop_refuses_teachers_it_cannot_draw_in_rounds():
    with pytest.raises(ConfigError, match="filter.early_stop draws sampled teachers in rounds: not with pool teachers"):
        load_recipe(GSM8K, ["filter.early_stop=true"])  # the GSM8K recipe's teachers are pools
    smol = REPO / "recipes" / "gsm8k-smollm2.yaml"
    assert load_recipe(smol, ["filter.early_stop=true"]).filter.early_stop
    with pytest.raises(ConfigError, match=r"filter.early_stop takes .* not with reuse: false \(--fresh\)"):
        load_recipe(smol, ["filter.early_stop=true", "reuse=false"])


def test_early_stop_refuses_fusion_of_every_problem(tmp_path):
    """Early stopping leaves a dropped problem with the samples drawn before it closed: fusing every problem
    would fuse those from a part of its pool, so only `fusion.problems: kept` (drawn in full) is taken."""
    raw = yaml.safe_load((REPO / "recipes" / "gsm8k-smollm2.yaml").read_text())
    raw["fusion"] = {"teachers": {"smollm2-135m": 2}, "export": {"name": "fused"},
                     "fusor": {"name": "fusor", "engine": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1"}}
    path = write(tmp_path, raw)
    with pytest.raises(ConfigError, match=r"fusion\.problems: all fuses every problem from all its samples, but "
                                          r"filter\.early_stop stops drawing") as e:
        load_recipe(path, ["filter.early_stop=true"])
    assert "\n" not in str(e.value)
    assert load_recipe(path, ["filter.early_stop=true", "fusion.problems=kept"]).fusion.problems == "kept"
    assert load_recipe(path).fusion.problems == "all"  # without early stopping, every problem is fused


def test_early_stop_takes_a_transformers_teacher_only_one_sample_a_batch(tmp_path):
    raw = base()
    raw["teachers"] = [{"name": "smol", "engine": "transformers", "model": "smollm2-135m-instruct", "n": 4}]
    path = write(tmp_path, raw)
    with pytest.raises(ConfigError, match=r"teachers\.smol\.batch_size: filter\.early_stop needs 1 with the "
                                          r"transformers engine \(got 16\): a batch's size moves every row's logits"):
        load_recipe(path, ["filter.early_stop=true"])
    assert load_recipe(path, ["filter.early_stop=true", "teachers.0.batch_size=1"]).filter.early_stop
    assert load_recipe(path).teachers[0].batch_size == 16  # without early stopping, batches as before


def test_override_syntax_and_index_errors():
    with pytest.raises(ConfigError, match="expected KEY.PATH=VALUE"):
        load_recipe(GSM8K, ["filter.max_pass_rate"])
    with pytest.raises(ConfigError, match="'9' is not an index of a list of 4"):
        load_recipe(GSM8K, ["teachers.9.n=3"])


def test_broken_yaml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"r\.yaml: line 2, column 1: expected ',' or '\]', but got '<stream end>'$"):
        load_recipe(write(tmp_path, "name: [unclosed\n"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_recipe(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="a recipe is a YAML mapping"):
        load_recipe(write(tmp_path, "- a\n- b\n"))


def test_duplicate_teacher_names(tmp_path):
    raw = base()
    raw["teachers"][1]["name"] = raw["teachers"][0]["name"]
    with pytest.raises(ConfigError, match="teacher names must be unique; repeated: gpt3-6b-finetuned"):
        load_recipe(write(tmp_path, raw))


def _problems(tmp_path, text: bytes):
    p = tmp_path / "p.jsonl"
    p.write_bytes(text)
    return load_problems(ProblemsConfig(source=DataSource(path=str(p)), name="t", fields=FieldMap()), p)


def test_bad_records_name_line_and_field(tmp_path):
    with pytest.raises(DataError, match=r"p\.jsonl, record line 2: not valid JSON"):
        _problems(tmp_path, b'{"question": "a", "answer": "1"}\n{oops\n')
    with pytest.raises(DataError, match=r"record line 1, field 'answer': missing field"):
        _problems(tmp_path, b'{"question": "a"}\n')
    with pytest.raises(DataError, match=r"record line 1, field 'question': expected a string, got list"):
        _problems(tmp_path, b'{"question": ["a"], "answer": "1"}\n')
    with pytest.raises(DataError, match=r"record line 1: invalid UTF-8"):
        _problems(tmp_path, b'{"question": "\xff", "answer": "1"}\n')
    with pytest.raises(DataError, match="no problems found"):
        _problems(tmp_path, b"\n")


def test_offline_without_mirror_says_how_to_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("BONFORGE_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("BONFORGE_CACHE", str(tmp_path / "cache"))
    src = DataSource(path="gsm8k/x.jsonl", url="http://127.0.0.1:9/x.jsonl", sha256="0" * 64)
    with pytest.raises(FetchError, match="Set BONFORGE_DATA to a directory that holds gsm8k/x.jsonl"):
        resolve(src)
    assert not (tmp_path / "cache" / "gsm8k").exists() or not any((tmp_path / "cache" / "gsm8k").iterdir())


def test_mirror_checksum_mismatch(tmp_path, monkeypatch):
    (tmp_path / "m" / "d").mkdir(parents=True)
    (tmp_path / "m" / "d" / "f.jsonl").write_text("{}\n")
    monkeypatch.setenv("BONFORGE_DATA", str(tmp_path / "m"))
    with pytest.raises(FetchError, match="sha256 does not match"):
        resolve(DataSource(path="d/f.jsonl", sha256="1" * 64))


def test_rl_dataset_needs_its_own_name(tmp_path):
    raw = base()
    raw["export"]["rl"] = {"name": raw["export"]["name"]}
    with pytest.raises(ConfigError, match=r"export\.rl\.name '.*' is the dataset export\.name publishes"):
        load_recipe(write(tmp_path, raw))
