"""Code loaders and pool importers on the real files; the stage in-process on a 10-row table."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from bonforge.errors import DataError
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.judging.spec import parse_spec
from bonforge.schema import CANDIDATES, PROBLEMS, VERDICTS
from bonforge.sources.code import (
    import_apps_pool,
    import_codet_pool,
    load_apps,
    load_humaneval,
    reference_candidates,
)
from bonforge.judging.code import verify_code


@pytest.fixture(scope="module")
def humaneval(data_dir):
    return load_humaneval(data_dir / "humaneval" / "HumanEval.jsonl.gz")


def test_humaneval_problems(humaneval):
    assert humaneval.schema == PROBLEMS and humaneval.num_rows == 164
    first = humaneval.slice(0, 1).to_pylist()[0]
    assert first["problem_id"] == "HumanEval/0" and first["domain"] == "code"
    spec = parse_spec(first["tests"], first["problem_id"])
    assert spec.kind == "assert" and spec.check.rstrip().endswith("check(has_close_elements)")


def test_codet_pool_matches_every_problem_once(data_dir, humaneval):
    pool = import_codet_pool(data_dir / "humaneval" / "codet_codegen16B_samples.jsonl", humaneval, n=8)
    assert pool.schema == CANDIDATES and pool.num_rows == 164 * 8
    assert len(set(pool.column("problem_id").to_pylist())) == 164
    assert pool.column("candidate_id")[9].as_py() == f"{pool.column('problem_id')[9].as_py()}/codegen16b/1"
    with pytest.raises(DataError, match="n must be positive"):
        import_codet_pool(data_dir / "humaneval" / "codet_codegen16B_samples.jsonl", humaneval, n=0)


def test_codet_matching_uses_prompt_text_for_shared_names(data_dir, humaneval):
    """HumanEval/10's prompt defines is_palindrome before make_palindrome; 38 and 50 define an encoder
    first: the match must follow the function the prompt ends with."""
    pool = import_codet_pool(data_dir / "humaneval" / "codet_codegen16B_samples.jsonl", humaneval, n=1)
    pids = set(pool.column("problem_id").to_pylist())
    assert {"HumanEval/10", "HumanEval/38", "HumanEval/50"} <= pids


def test_apps_problems_and_pool(data_dir):
    problems = load_apps(data_dir / "apps-coderl")
    assert problems.num_rows == 5
    kinds = {p["problem_id"]: parse_spec(p["tests"], p["problem_id"]).kind for p in problems.to_pylist()}
    assert kinds == {"apps/0001": "stdio", "apps/0111": "stdio", "apps/2287": "stdio", "apps/2404": "call",
                     "apps/4184": "call"}  # fmt: skip
    pool = import_apps_pool(data_dir / "apps-coderl", problems)
    assert pool.num_rows == 83 and pool.schema == CANDIDATES
    raw = json.loads((data_dir / "apps-coderl" / "0111" / "gen_solutions.json").read_text())
    labels = pool.filter(pa.compute.equal(pool.column("problem_id"), "apps/0111")).column("reference_correct")
    assert labels.to_pylist() == [r["result"] is True for r in raw]
    refs = reference_candidates(problems)
    assert refs.num_rows == 24 + 1 + 10 + 58 + 8 and set(refs.column("teacher").to_pylist()) == {"reference"}


def test_load_apps_names_the_bad_record(tmp_path):
    (tmp_path / "0042").mkdir()
    (tmp_path / "0042" / "input_output.json").write_text('{"inputs": ["1"], "outputs": []}')
    with pytest.raises(DataError, match=r"record apps/0042, field 'input_output': 1 inputs but 0 outputs"):
        load_apps(tmp_path)


def test_stage_in_process_on_ten_rows(humaneval):
    """The stage as a plain function (process backend: runs where no Docker engine is)."""
    problems = humaneval.slice(0, 5)
    refs = reference_candidates(problems)
    broken = refs.to_pylist()
    for row in broken:
        row.update(teacher="broken", candidate_id=row["candidate_id"].replace("reference", "broken"),
                   text="    return None\n")  # fmt: skip
    candidates = pa.concat_tables([refs, pa.Table.from_pylist(broken, schema=CANDIDATES)])
    verdicts = verify_code(problems, candidates, CodeVerifyConfig(backend="process", pool_size=2))
    assert verdicts.schema == VERDICTS and verdicts.num_rows == 10
    by_teacher = {}
    for v in verdicts.to_pylist():
        by_teacher.setdefault(v["teacher"], set()).add((v["status"], v["reward"]))
    assert by_teacher["reference"] == {("passed", 1.0)}
    # returning None fails the check (wrong_answer) or makes the check itself crash (runtime_error)
    assert ("wrong_answer", 0.0) in by_teacher["broken"]
    assert by_teacher["broken"] <= {("wrong_answer", 0.0), ("runtime_error", 0.0)}
    assert verdicts.column("candidate_id").to_pylist() == candidates.column("candidate_id").to_pylist()


def test_stage_names_unknown_problem(humaneval):
    cands = pa.Table.from_pylist([{"candidate_id": "X/t/0", "problem_id": "X", "teacher": "t", "sample_index": 0,
                                   "text": "x"}], schema=CANDIDATES)  # fmt: skip
    with pytest.raises(DataError, match=r"candidates, record X/t/0, field 'problem_id'"):
        verify_code(humaneval, cands, CodeVerifyConfig(backend="process"))
