"""Pool teachers: a record's ``language`` (a name, a list beside the samples, CodeContests' codes) and a label
for a whole pool reach the candidates; a value that names no language is one clear error."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from bonforge.config import PoolTeacher
from bonforge.errors import DataError
from bonforge.schema import PROBLEMS
from bonforge.stages.load_pool import import_pool


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
