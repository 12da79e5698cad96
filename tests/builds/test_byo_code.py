"""Code problems brought as tables: every test shape, from JSONL and from Parquet, loaded by field mapping
and run in the real Docker sandbox: reference solutions pass, wrong programs fail."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bonforge.config import ProblemsConfig
from bonforge.judging.spec import parse_spec
from bonforge.stages.load import load_problems
from bonforge.sources.code import reference_candidates
from bonforge.judging.code import verify_code

from code_shapes import SHAPES, write_jsonl

pytestmark = pytest.mark.docker


def problems_cfg(shape: str, fmt: str, path) -> ProblemsConfig:
    return ProblemsConfig(source={"path": str(path)}, name=f"{shape}-{fmt}", format=fmt, domain="code",
                          fields=SHAPES[shape][1])  # fmt: skip


@pytest.fixture(scope="module")
def loaded(data_dir, tmp_path_factory):
    """{(shape, format): (problems, wrong programs)} for every shape, from JSONL and Parquet files."""
    tmp = tmp_path_factory.mktemp("shapes")
    out = {}
    for shape, (make, _) in SHAPES.items():
        rows, wrong = make(data_dir)
        jsonl = write_jsonl(tmp / f"{shape}.jsonl", rows)
        parquet = tmp / f"{shape}.parquet"
        pq.write_table(pa.Table.from_pylist(rows), parquet)
        for fmt, path in (("jsonl", jsonl), ("parquet", parquet)):
            out[shape, fmt] = (load_problems(problems_cfg(shape, fmt, path), path), wrong)
    return out


def test_parquet_and_jsonl_give_the_same_problems(loaded):
    for shape in SHAPES:
        a, b = loaded[shape, "jsonl"][0].to_pylist(), loaded[shape, "parquet"][0].to_pylist()
        assert [{**r, "problem_id": None, "source": None} for r in a] == [
            {**r, "problem_id": None, "source": None} for r in b], shape


def test_specs_carry_kinds_limits_and_starter(loaded):
    kinds = {shape: [parse_spec(p["tests"], p["problem_id"]).kind for p in t.to_pylist()]
             for (shape, fmt), (t, _) in loaded.items() if fmt == "jsonl"}  # fmt: skip
    assert kinds == {"codecontests": ["stdio"] * 3, "apps": ["stdio", "call", "call"],
                     "livecodebench": ["stdio", "call"], "assert": ["assert"] * 3, "bonforge": ["stdio"]}  # fmt: skip
    cc = loaded["codecontests", "jsonl"][0].to_pylist()
    spec = parse_spec(cc[2]["tests"], "x")
    assert spec.time_limit_s == 2.0 and len(spec.inputs) == 3  # public + private tests joined
    assert json.loads(cc[0]["metadata"])["memory_limit_mb"] == 256.0
    assert cc[0]["problem_id"] == "apps-0001" and len(json.loads(cc[0]["metadata"])["reference_solutions"]) == 24
    taco = loaded["apps", "parquet"][0].to_pylist()
    assert parse_spec(taco[1]["tests"], "x").time_limit_s == 4.0
    assert taco[1]["question"].rstrip().endswith("def findKthPositive(self, arr: List[int], k: int) -> int:")


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_references_pass_and_wrong_programs_fail_in_docker(loaded, docker_pool, fmt):
    from bonforge.sandbox.config import CodeVerifyConfig

    shapes = {shape: loaded[shape, fmt] for shape in SHAPES}
    problems = pa.concat_tables([t for t, _ in shapes.values()])
    first = {}
    for r in reference_candidates(problems).to_pylist():  # one reference per problem
        first.setdefault(r["problem_id"], r)
    rows = list(first.values())
    for t, wrong in shapes.values():
        for pid, text in zip(t.column("problem_id").to_pylist(), wrong, strict=True):
            rows.append({**first[pid], "candidate_id": f"{pid}/wrong/0", "teacher": "wrong", "text": text})
    verdicts = verify_code(problems, pa.Table.from_pylist(rows), CodeVerifyConfig(time_limit_s=1.0, memory_mb=256),
                           pool=docker_pool)  # fmt: skip
    got = {(r["problem_id"], r["teacher"]): (r["status"], r["detail"]) for r in verdicts.to_pylist()}
    assert len(first) == problems.num_rows == 12 and len(got) == 24
    assert {k: v for k, v in got.items() if k[1] == "reference" and v[0] != "passed"} == {}
    assert {k: v for k, v in got.items() if k[1] == "wrong" and v[0] == "passed"} == {}
