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


def _trajectory(k: int) -> list[dict]:
    """A tool-using trajectory whose messages differ by ``k`` (unicode, an extra field, empty tool output)."""
    call = {"id": f"call_{k}", "type": "function", "function": {"name": "python",
                                                                "arguments": json.dumps({"code": f"print({k}*2)"})}}
    return [{"role": "system", "content": "Use the tool."}, {"role": "user", "content": f"Double {k} — ×2?"},
            {"role": "assistant", "content": None if k % 2 else "Running it.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{k}", "content": "" if k % 7 == 0 else str(2 * k)},
            {"role": "assistant", "content": f"A: {2 * k}", **({"reasoning_content": "doubled"} if k % 3 else {})}]


def test_a_thousand_trajectories_come_in_whole(tmp_path):
    """1,000 trajectories over the two problems, one or several a record: every message and field of each is
    in ``messages`` in file order, its last answer in ``text``; a plain pool has no trajectory (control)."""
    records = [{"name": f"p{1 + k % 2}", "m": _trajectory(k)} for k in range(600)]
    records += [{"name": "p1", "m": [_trajectory(k) for k in range(600 + j, 600 + j + 4)]} for j in range(0, 400, 4)]
    out = _pool(tmp_path, records, format="messages", samples="m").to_pylist()
    assert len(out) == 1000
    want = {"p1": [], "p2": []}
    for r in records:
        want[r["name"]] += [r["m"]] if isinstance(r["m"][0], dict) else r["m"]
    got = {"p1": [], "p2": []}
    for row in out:
        got[row["problem_id"]].append((row["sample_index"], json.loads(row["messages"]), row["text"]))
    for pid in got:
        got[pid].sort(key=lambda r: r[0])
        assert [m for _, m, _ in got[pid]] == want[pid]
        assert [t for _, _, t in got[pid]] == [m[-1]["content"] for m in want[pid]]
    plain = _pool(tmp_path, [{"name": "p1", "s": ["A: 1"]}], samples="s")
    assert plain.column("messages").to_pylist() == [None]


def test_trajectory_labels_come_from_the_record(tmp_path):
    out = _pool(tmp_path, [{"name": "p1", "m": [_trajectory(1), _trajectory(2)], "ok": [True, False]},
                           {"name": "p2", "m": _trajectory(3), "ok": True}], format="messages", samples="m", label="ok")
    assert out.column("reference_correct").to_pylist() == [True, False, True]


@pytest.mark.parametrize("record, field, words", [
    ({"name": "p1", "m": [{"role": "user", "content": "hi"}]}, "m[0][0]", "does not end with the assistant's answer"),
    ({"name": "p1", "m": [[{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x", "content": ""},
                           {"role": "assistant", "content": "A: 1"}]]}, "m[0][1].tool_call_id", "answers no open"),
    ({"name": "p1", "m": "A: 1"}, "m[0]", "non-empty list"),
    ({"name": "p1", "m": [_trajectory(1), 7]}, "m[1]", "non-empty list"),
    ({"name": "p1", "m": [_trajectory(1)], "ok": [True, False]}, "ok", "2 labels for 1 trajectories"),
])
def test_a_malformed_trajectory_is_one_error_naming_line_and_field(tmp_path, record, field, words):
    with pytest.raises(DataError) as e:
        _pool(tmp_path, [{"name": "p2", "m": _trajectory(0)}, record], format="messages", samples="m",
              label="ok" if "ok" in record else None)
    assert e.value.record == "line 2" and e.value.field == field and words in e.value.message


def test_a_trajectory_pool_takes_no_text_field():
    with pytest.raises(ValueError, match="remove `text` and `language`"):
        PoolTeacher(engine="pool", name="t", source={"path": "x.jsonl"}, format="messages", text="content")


def test_a_parquet_trajectory_with_a_value_json_cannot_hold_is_one_error(tmp_path):
    """A Parquet pool's messages are typed: a binary field (or NaN) in a message is one error naming the
    record and the message, not a traceback when the trajectory is stored; the same file without it comes in."""
    import pyarrow.parquet as pq

    def write(extra):
        messages = [{"role": "user", "content": "q", "blob": extra}, {"role": "assistant", "content": "A: 1",
                                                                       "blob": None}]
        pq.write_table(pa.Table.from_pylist([{"name": "p1", "m": messages}]), tmp_path / "pool.parquet")
        problems = pa.Table.from_pylist([{"problem_id": "p1", "domain": "math", "question": "q"}], schema=PROBLEMS)
        cfg = PoolTeacher(engine="pool", name="t", source={"path": str(tmp_path / "pool.parquet")}, match="id",
                          match_field="name", format="messages", samples="m")
        return import_pool(cfg, tmp_path / "pool.parquet", problems)

    for bad in (b"\xff\x00", float("nan")):
        with pytest.raises(DataError) as e:
            write(bad)
        assert e.value.field == "m[0][0]" and "JSON cannot hold" in e.value.message
    assert json.loads(write(None).column("messages")[0].as_py())[0]["blob"] is None  # control
