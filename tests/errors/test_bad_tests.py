"""Bad test data in a code table: one clear error naming the file, the record and the field; pickles are
refused, never loaded."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bonforge.config import ProblemsConfig
from bonforge.errors import DataError
from bonforge.stages.load import load_problems

from code_shapes import lcb_private_tests

GOOD = {"input": ["1\n"], "output": ["2\n"]}
CASES = [
    ({"input": [], "output": []}, {}, r"field 'tests': empty test list"),
    ({"input": ["1\n", "2\n"], "output": ["2\n"]}, {}, r"field 'tests': 2 inputs but 1 outputs"),
    ({"input": [3], "output": ["2\n"]}, {}, r"field 'tests': test 0: stdin must be a string, got int"),
    ({"inputs": [["a"]], "outputs": [1, 2]}, {}, r"field 'tests': 1 inputs but 2 outputs"),
    ('[{"input": "1", "output": "2", "testtype": "functional"}]', {},
     r"field 'tests': functional tests need the function's name: set fields.fn_name"),
    (lcb_private_tests([{"input": "1", "output": "2", "testtype": "stdin"}]), {},
     r"field 'tests': a pickled \(or compressed pickled\) value: bonforge never unpickles data"),
    ('{"input": ["1"], ', {}, r"field 'tests': not valid JSON"),
    ("42", {}, r"field 'tests': cannot tell the tests' shape \(str\); name it in fields.tests_format"),
    (GOOD, {"time_limit": "soon"}, r"field 'time_limit': not a time limit: 'soon'"),
    (GOOD, {"memory_limit": "lots"}, r"field 'memory_limit': not a memory limit: 'lots'"),
    ({"kind": "stdio", "tests": [{"input": "1"}]}, {}, r"field 'tests': test 0 needs an 'output'"),
]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("tests,extra,message", CASES)
def test_bad_tests_name_record_and_field(tmp_path, fmt, tests, extra, message):
    unset = dict.fromkeys(extra)
    rows = [{"question": f"q{i}", "tests": json.dumps(GOOD), **unset} for i in range(2)] + [
            {"question": "q2", "tests": tests if isinstance(tests, str) else json.dumps(tests), **extra}]
    path = tmp_path / f"p.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        where = r"record line 3 \(cc/00002\)"
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
        where = r"record row 2 \(cc/00002\)"
    cfg = ProblemsConfig(source={"path": str(path)}, name="cc", domain="code", format=fmt, fields={"tests": "tests"})
    with pytest.raises(DataError, match=rf"p\.{fmt}, {where}, {message}"):
        load_problems(cfg, path)


def test_raw_pickle_bytes_are_refused(tmp_path):
    import pickle

    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"question": ["q"], "tests": [pickle.dumps([{"input": "1", "output": "2"}])]}), path)
    cfg = ProblemsConfig(source={"path": str(path)}, name="cc", domain="code", format="parquet",
                         fields={"tests": "tests"})  # fmt: skip
    with pytest.raises(DataError, match="never unpickles"):
        load_problems(cfg, path)


def test_recipe_rules_for_code_tables():
    with pytest.raises(ValueError, match="code problems from a table need fields.tests"):
        ProblemsConfig(source={"path": "x.jsonl"}, name="cc", domain="code")
    with pytest.raises(ValueError, match=r"fields.tests applies to code problems"):
        ProblemsConfig(source={"path": "x.jsonl"}, name="cc", fields={"tests": "tests"})


def test_new_fields_keep_the_keys_of_older_recipes():
    """Fields added with the table loaders stay out of the problems key until a recipe sets them."""
    cfg = ProblemsConfig(source={"path": "gsm8k.jsonl"}, name="gsm8k")
    assert set(cfg.key_config()) == {"source", "name", "format", "domain", "fields", "limit", "include_reference"}
    assert set(cfg.key_config()["fields"]) == {"question", "answer", "id", "metadata"}
    code = ProblemsConfig(source={"path": "cc.jsonl"}, name="cc", domain="code", fields={"tests": "t"})
    assert code.key_config()["fields"]["tests"] == "t"


def test_limits_in_the_forms_datasets_write_them():
    from bonforge.sources.spec_formats import Where, memory_limit_mb, time_limit_s

    w = Where("t.jsonl", "line 1")
    assert [time_limit_s(v, w, "time_limit") for v in ("2 seconds", "1.5 s", "500 ms", 3, {"seconds": 1, "nanos": 5e8},
                                                        {"seconds": 0, "nanos": 0}, None, "None")] == [
        2.0, 1.5, 0.5, 3.0, 1.5, None, None, None]  # fmt: skip
    assert [memory_limit_mb(v, w, f) for v, f in (("256 megabytes", "m"), ("1 GB", "m"), (512, "m"),
                                                   (268435456, "memory_limit_bytes"), ("None", "m"))] == [
        256.0, 1024.0, 512.0, 256.0, None]  # fmt: skip
    with pytest.raises(DataError, match=r"t.jsonl, record line 1, field 'time_limit': not a time limit: -1"):
        time_limit_s(-1, w, "time_limit")
