"""docs/problems.md's "Bringing your own generations" as written: each example's pool file and teacher,
under the section's recipe, gives the same candidates (the two layouts, matching by question, by id in
`id` or another field, and by order), and every pool key of the recipe model is in the section's table.
A record's ``language`` (a name, a list beside the samples, CodeContests' codes) and a label for a whole
pool reach the candidates; a value that names no language is one clear error."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from bonforge.config import PoolTeacher, load_recipe
from bonforge.errors import DataError
from bonforge.schema import PROBLEMS
from bonforge.sources import data
from bonforge.sources.problems import load_problems
from bonforge.stages.load_pool import import_pool

DOC = Path(__file__).resolve().parents[2] / "docs" / "problems.md"
WANT = [("toy/00000", 0, "2 + 3 = 5. A: 5"), ("toy/00000", 1, "A: 6"), ("toy/00001", 0, "A: 8")]


def section() -> str:
    text = DOC.read_text()
    start = text.index("## Bringing your own generations")
    return text[start:text.index("\n## ", start + 1)]


def blocks() -> list[tuple[str, str, str]]:
    """(language, file name or "", body) of each fenced block of the section, in order."""
    return [(m[1], m[2].strip(), m[3]) for m in re.finditer(r"```(\w+)([^\n]*)\n(.*?)```", section(), re.S)]


def examples() -> list[tuple[str, str, str]]:
    """(pool file name, its content, the teachers YAML) of each example."""
    found = [b for b in blocks() if b[1] not in ("problems.jsonl", "recipe.yaml") and b[0] in ("jsonl", "yaml")]
    pairs = list(zip(found[::2], found[1::2]))
    assert pairs and all(a[0] == "jsonl" and a[1] and b[0] == "yaml" for a, b in pairs), found
    return [(a[1], a[2], b[2]) for a, b in pairs]


@pytest.mark.parametrize("example", examples(), ids=lambda e: e[0])
def test_each_documented_example_brings_the_same_candidates(tmp_path, example):
    name, content, teachers = example
    files = {b[1]: b[2] for b in blocks() if b[1] in ("problems.jsonl", "recipe.yaml")}
    (tmp_path / "problems.jsonl").write_text(files["problems.jsonl"])
    (tmp_path / name).write_text(content)
    (tmp_path / "recipe.yaml").write_text(files["recipe.yaml"] + teachers)
    recipe = load_recipe(tmp_path / "recipe.yaml")
    problems = load_problems(recipe.problems, data.resolve(recipe.problems.source, tmp_path))
    (teacher,) = recipe.teachers
    got = import_pool(teacher, data.resolve(teacher.source, tmp_path), problems)
    rows = sorted(zip(*(got.column(c).to_pylist() for c in ("problem_id", "sample_index", "text"))))
    assert rows == WANT
    ids = got.column("candidate_id").to_pylist()
    assert sorted(ids) == [f"{p}/my-model/{i}" for p, i, _ in WANT]
    labels = dict(zip(got.column("text").to_pylist(), got.column("reference_correct").to_pylist()))
    assert labels == ({"2 + 3 = 5. A: 5": True, "A: 6": False, "A: 8": True} if teacher.label else
                      dict.fromkeys(labels))


def test_the_table_names_every_pool_key():
    table = {m[1] for m in re.finditer(r"^\| `(\w+)` \|", section(), re.M)}
    assert table == set(PoolTeacher.model_fields)


def test_the_examples_use_the_documented_keys_only():
    for _, _, teachers in examples():
        for teacher in yaml.safe_load(teachers)["teachers"]:
            assert set(teacher) <= set(PoolTeacher.model_fields)


def _pool(tmp_path, records: list[dict], **teacher):
    path = tmp_path / "pool.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    problems = pa.Table.from_pylist([{"problem_id": p, "domain": "code", "question": p} for p in ("p1", "p2")],
                                    schema=PROBLEMS)  # fmt: skip
    cfg = PoolTeacher(engine="pool", name="t", source={"path": str(path)}, match="id", match_field="name", **teacher)
    return import_pool(cfg, path, problems)


def test_codecontests_language_codes_and_a_whole_pool_label(tmp_path):
    """2 C++, 3 Python 3, 4 Java; Python 2 (1) and unknown (0) cannot run: left out, the others keep their
    sample index (their place in the record)."""
    rec = {"name": "p1", "incorrect_solutions": {"language": [2, 1, 3, 4, 0], "solution": ["a", "b", "c", "d", "e"]}}
    out = _pool(tmp_path, [rec], samples="incorrect_solutions.solution", language="incorrect_solutions.language",
                reference_correct=False)  # fmt: skip
    got = [(r["candidate_id"], r["text"], r["language"], r["reference_correct"]) for r in out.to_pylist()]
    assert got == [("p1/t/0", "a", "cpp", False), ("p1/t/2", "c", "python", False), ("p1/t/3", "d", "java", False)]


def test_one_language_for_a_record_and_names_as_given(tmp_path):
    out = _pool(tmp_path, [{"name": "p1", "s": ["x", "y"], "lang": "C++"}, {"name": "p2", "s": "z"}],
                samples="s", language="lang")  # fmt: skip
    assert [(r["language"], r["reference_correct"]) for r in out.to_pylist()] == [("c++", None), ("c++", None),
                                                                                  (None, None)]  # fmt: skip


@pytest.mark.parametrize("lang, match", [([2], "1 languages for 2 samples"), ([2, 9], "CodeContests language code"),
                                         ([2, True], "CodeContests language code")])  # fmt: skip
def test_a_language_that_names_nothing_is_one_clear_error(tmp_path, lang, match):
    with pytest.raises(DataError, match=match) as e:
        _pool(tmp_path, [{"name": "p1", "s": ["x", "y"], "lang": lang}], samples="s", language="lang")
    assert "pool.jsonl" in str(e.value) and "line 1" in str(e.value) and "lang" in str(e.value)
