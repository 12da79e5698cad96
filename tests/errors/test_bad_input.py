"""Bad input: each case gives an error naming the record and the field (or a recorded verdict), and no
partial output becomes visible. Recipe-level cases (unknown keys, broken YAML, bad problem lines) are in
test_recipe_errors.py; these cover pools, code problems, enormous candidates, teacher names and what a
failed build leaves behind."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from bonforge.config import DataSource, FieldMap, GenSelectConfig, MathVerifyConfig, PoolTeacher, ProblemsConfig
from bonforge.config import load_recipe
from bonforge.errors import ConfigError, DataError
from bonforge.engine import run_node
from bonforge.storage.catalog import connect
from bonforge.stage import Stage
from bonforge.stages.load import load_problems
from bonforge.stages.load_pool import import_pool
from bonforge.storage.run_record import RunRecord

REPO = Path(__file__).resolve().parents[2]
GSM8K = REPO / "recipes" / "gsm8k-genselect.yaml"
GOOD = {"question": "What is 1 + 1?", "s": [{"solution": "A: 2", "ok": True}, {"solution": "A: 3", "ok": False}]}


def problems_table(tmp_path) -> pa.Table:
    p = tmp_path / "problems.jsonl"
    p.write_text(
        json.dumps({"question": "What is 1 + 1?", "answer": "A: 2"})
        + "\n"
        + json.dumps({"question": "What is 2 + 2?", "answer": "A: 4"})
        + "\n"
    )
    return load_problems(ProblemsConfig(source=DataSource(path=str(p)), name="t", fields=FieldMap()), p)


def pool(tmp_path, content: bytes, **teacher) -> pa.Table:
    path = tmp_path / "pool.jsonl"
    path.write_bytes(content)
    t = PoolTeacher(
        engine="pool", name="t1", source=DataSource(path=str(path)), samples="s", text="solution", label="ok", **teacher
    )
    return import_pool(t, path, problems_table(tmp_path))


def line(rec: dict) -> bytes:
    return (json.dumps(rec) + "\n").encode()


@pytest.mark.parametrize(("content", "message"), [
    (line(GOOD) + b'{"question": "What is 2 + 2?", "s": [\n', r"pool\.jsonl, record line 2: not valid JSON"),
    (line(GOOD) + b'{"question": "What is 2 + 2?", "s": ["\xff"]}\n', r"record line 2: invalid UTF-8"),
    (line({"question": "What is 1 + 1?"}), r"record line 1, field 's': missing field \(record has: question\)"),
    (line({**GOOD, "s": [{"text": "A: 2"}]}), r"record line 1, field 's\[0\]\.solution': missing field"),
    (line({**GOOD, "s": ["A: 2"]}), r"record line 1, field 's\[0\]': expected an object with 'solution'"),
    (line({**GOOD, "s": [{"solution": ["A: 2"]}]}), r"field 's\[0\]\.solution': expected a string, got list"),
    (line({**GOOD, "s": [{"solution": "A: 2", "ok": "yes"}]}), r"field 's\[0\]\.ok': label must be true/false"),
    (line({**GOOD, "question": 7}), r"no pool record matched any of the 2 problems"),
    (b"", r"no pool record matched any of the 2 problems by question \(the records' field 'question'\)"),
    (b"\n\n", r"no pool record matched"),
])  # fmt: skip
def test_bad_pool_records_name_line_and_field(tmp_path, content, message):
    with pytest.raises(DataError, match=message):
        pool(tmp_path, content)


def test_a_pool_matched_by_id_reads_the_id_field_and_says_what_ids_look_like(tmp_path):
    got = pool(tmp_path, line({"id": "t/00001", "s": [{"solution": "A: 4", "ok": True}]}), match="id")
    assert got.column("candidate_id").to_pylist() == ["t/00001/t1/0"]
    with pytest.raises(DataError, match=r"no pool record matched any of the 2 problems by id \(the records' field "
                                        r"'id'; the first record's is '1'\), problem ids are like 't/00000' "
                                        r"\(problems.fields.id names them\)"):
        pool(tmp_path, line({"id": "1", "s": [{"solution": "A: 4", "ok": True}]}), match="id")


def test_a_problem_s_samples_may_come_one_record_each(tmp_path):
    """One record per sample: a problem's samples are numbered on across its records (distinct candidate
    ids), and ``n`` caps them all together."""
    records = [{"question": q, "s": {"solution": s, "ok": ok}} for q, s, ok in [
        ("What is 1 + 1?", "A: 2", True), ("What is 2 + 2?", "A: 4", True), ("What is 1 + 1?", "A: 3", False),
        ("What is 1 + 1?", "A: 11", False)]]
    got = pool(tmp_path, b"".join(line(r) for r in records))
    assert got.column("candidate_id").to_pylist() == ["t/00000/t1/0", "t/00001/t1/0", "t/00000/t1/1", "t/00000/t1/2"]
    assert got.column("sample_index").to_pylist() == [0, 0, 1, 2]
    capped = pool(tmp_path, b"".join(line(r) for r in records), n=2)
    assert capped.column("text").to_pylist() == ["A: 2", "A: 4", "A: 3"]


def test_pool_record_without_samples_contributes_nothing(tmp_path):
    """An empty sample list is not an error; the problem just has no candidates from this teacher."""
    got = pool(tmp_path, line(GOOD) + line({"question": "What is 2 + 2?", "s": []}))
    assert set(got.column("problem_id").to_pylist()) == {"t/00000"}


def test_problem_duplicates_and_wrong_types(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"id": "a", "question": "q", "answer": "1"}\n{"id": "a", "question": "r", "answer": "2"}\n')
    cfg = ProblemsConfig(source=DataSource(path=str(p)), name="t", fields=FieldMap(id="id"))
    with pytest.raises(DataError, match=r"record line 2, field 'id': duplicate problem id 'a' \(first at record 1\)"):
        load_problems(cfg, p)
    p.write_text('{"id": "a", "question": "q", "answer": {"value": 1}}\n')
    with pytest.raises(DataError, match=r"record line 1, field 'answer': expected a string, got dict"):
        load_problems(cfg, p)
    p.write_text('{"id": "a", "question": "   ", "answer": "1"}\n')
    with pytest.raises(DataError, match=r"record line 1, field 'question': empty string"):
        load_problems(cfg, p)


def test_code_problem_without_tests_is_refused_before_any_container(tmp_path):
    from bonforge.sandbox.config import CodeVerifyConfig
    from bonforge.sources.code import load_apps
    from bonforge.judging.code import verify_code

    d = tmp_path / "apps" / "0007"
    d.mkdir(parents=True)
    (d / "question.txt").write_text("Print the sum.")
    (d / "input_output.json").write_text(json.dumps({"inputs": [], "outputs": []}))
    with pytest.raises(DataError, match=r"record apps/0007, field 'input_output': empty test list"):
        load_apps(tmp_path / "apps")
    (d / "input_output.json").write_text(json.dumps({"inputs": ["1"], "outputs": []}))
    with pytest.raises(DataError, match=r"record apps/0007, field 'input_output': 1 inputs but 0 outputs"):
        load_apps(tmp_path / "apps")
    problems = pa.table({"problem_id": ["apps/0007"], "question": ["Print the sum."],
                         "tests": ['{"kind": "stdio", "tests": []}']})  # fmt: skip
    cands = pa.table(
        {"candidate_id": ["apps/0007/t/0"], "problem_id": ["apps/0007"], "teacher": ["t"], "text": ["print(1)"]}
    )
    # given to verify_code directly, the bad spec is that problem's verdict (no container starts for it)
    (verdict,) = verify_code(problems, cands, CodeVerifyConfig()).to_pylist()
    assert verdict["status"] == "sandbox_error" and verdict["reward"] == 0.0
    assert "problems, record apps/0007, field 'tests': stdio spec needs a non-empty" in verdict["detail"]


def test_candidate_of_an_unknown_problem_names_the_candidate(tmp_path):
    from bonforge.sandbox.config import CodeVerifyConfig
    from bonforge.judging.code import verify_code

    problems = pa.table({"problem_id": ["p1"], "question": ["q"], "tests": ['{"kind": "stdio", "tests": []}']})
    cands = pa.table({"candidate_id": ["p9/t/0"], "problem_id": ["p9"], "teacher": ["t"], "text": ["x"]})
    with pytest.raises(DataError, match=r"candidates, record p9/t/0, field 'problem_id': problem 'p9' is not in"):
        verify_code(problems, cands, CodeVerifyConfig())


def test_enormous_candidate_is_verified_and_never_enters_a_prompt():
    """A 4 MB candidate gets a verdict like any other, and every prompt holding it is over the token limit
    and dropped; the other candidates still make prompts."""
    from bonforge.stages.assemble import assemble
    from bonforge.judging.math import verify_math

    huge = "x" * (4 << 20) + "\nA: 3"
    texts = ["A: 2", huge, "A: 5", "A: 7", "A: 2"]
    cands = pa.table(
        {"candidate_id": [f"p/t/{i}" for i in range(5)], "problem_id": ["p"] * 5, "teacher": ["t"] * 5, "text": texts}
    )
    problems = pa.table({"problem_id": ["p"], "answer": ["A: 2"]})
    verdicts = verify_math(cands, problems, MathVerifyConfig(timeout_s=30))
    assert verdicts.column("status").to_pylist() == [
        "correct",
        "wrong_answer",
        "wrong_answer",
        "wrong_answer",
        "correct",
    ]
    pool = pa.table(
        {
            "problem_id": ["p"] * 5,
            "question": ["What?"] * 5,
            "domain": ["math"] * 5,
            "candidate_id": cands.column("candidate_id"),
            "text": texts,
            "correct": verdicts.column("correct"),
            "status": verdicts.column("status"),
        }
    )
    prompts = assemble(pool, GenSelectConfig(prompts_per_problem=8), seed=0)
    assert prompts.num_rows > 0
    assert all("p/t/1" not in ids for ids in prompts.column("candidate_ids").to_pylist())
    assert max(prompts.column("n_tokens").to_pylist()) <= 16384


def test_teacher_by_name_in_set_and_unknown_teacher_names():
    r = load_recipe(GSM8K, ["teachers.gpt3-6b-verifier.n=2"])
    assert [t.n for t in r.teachers] == [None, 2, None, None]
    with pytest.raises(
        ConfigError,
        match=r"--set 'teachers\.gpt3-7b': 'gpt3-7b' is not an index of a list of 4 "
        r"nor a name \(gpt3-6b-finetuned, gpt3-6b-verifier,",
    ):
        load_recipe(GSM8K, ["teachers.gpt3-7b.n=2"])


def test_failed_stage_leaves_nothing_visible(store):
    """Shards written before a failing shard stay hidden: no manifest, so neither readers nor the catalog
    see the stage, and a rerun computes only the missing shards."""
    table = pa.table({"problem_id": [f"p{i}" for i in range(6)]})
    calls = []

    def compute(shard: pa.Table) -> pa.Table:
        calls.append(shard.num_rows)
        if len(calls) == 2:
            raise DataError("bad record", "src", shard.column("problem_id")[0].as_py(), "question")
        return shard

    node = Stage("problems", "1", compute=compute, table=lambda i: table, shard_rows=2).bind({}, {})
    with pytest.raises(DataError, match="src, record p2, field 'question': bad record"):
        run_node(store, node)
    assert not store.exists("problems", node.key) and store.done_shards("problems", node.key) == {0}
    store.record_run(RunRecord.from_json({"run_id": "r1", "status": "failed", "stages": {"problems": [node.key]}}))
    con = connect(store)
    assert "problems" not in {r[0] for r in con.sql("SHOW TABLES").fetchall()}
    assert con.sql("SELECT rows FROM run_stages").fetchall()[0] == (None,)
    man = run_node(store, node)
    assert man["rows"] == 6 and man["shards_resumed"] == 1 and calls == [2, 2, 2, 2]
