"""What verification reads of its inputs: the columns judging and the verdict identity use, not the
candidates' reasoning (a thinking model's is many times its answer) or the problems' metadata; the progress it
reports while a shard is judged."""

from __future__ import annotations

import contextlib

import pyarrow as pa
import pytest

from bonforge.schema import CANDIDATES, PROBLEMS
from bonforge.stages import verify


class Recorder:
    """Inputs that record the columns each read asks for."""

    def __init__(self):
        self.asked: dict[str, list[str] | None] = {}

    def read(self, name: str, columns: list[str] | None = None) -> pa.Table:
        self.asked[name] = columns
        schema = CANDIDATES if name == "candidates" else PROBLEMS
        return schema.empty_table() if columns is None else schema.empty_table().select(columns)

    def sql(self, query: str) -> pa.Table:
        assert query == "SELECT * FROM candidates LIMIT 0"
        return CANDIDATES.empty_table()

    def columns(self, name: str) -> list[str]:
        return (CANDIDATES if name == "candidates" else PROBLEMS).names

    @contextlib.contextmanager
    def aligned(self, columns: dict[str, list[str]]):
        self.asked.update(columns)
        yield iter([{name: self.read(name, cols) for name, cols in columns.items()}])


@pytest.mark.parametrize("stage", [verify.MATH, verify.CODE], ids=["math", "code"])
def test_verification_reads_only_the_columns_it_judges(stage):
    inputs = Recorder()
    assert stage.table is None  # streamed: read in problem_id order, a bounded batch at a time
    list(stage.stream(inputs))
    stage.context(inputs)
    assert inputs.asked == {"candidates": ["candidate_id", "problem_id", "teacher", "text", "text_digest",
                                           "language"],  # the language a record names decides with the text
                            "problems": ["problem_id", "domain", "question", "answer", "tests"]}


def test_maths_progress_counts_each_piece_and_judges_the_same():
    from bonforge.config import MathVerifyConfig
    from bonforge.judging.math import verify_math

    n = 70
    cands = pa.table({"candidate_id": [f"c{i}" for i in range(n)], "problem_id": [f"p{i % 3}" for i in range(n)],
                      "teacher": ["t"] * n, "text": [f"A: {i % 5}" for i in range(n)]})
    problems = pa.table({"problem_id": ["p0", "p1", "p2"], "answer": ["1", "2", "3"]})
    heard: list[tuple[int, int]] = []
    out = verify._verify_math(cands, problems, MathVerifyConfig(), progress=lambda d, of: heard.append((d, of)))
    assert heard == [(32, 70), (64, 70), (70, 70)]
    whole = verify_math(cands, problems, MathVerifyConfig())
    assert out.drop(["latency_ms"]).equals(whole.drop(["latency_ms"]))


def test_code_progress_counts_each_program_as_it_is_judged():
    import json

    from bonforge.judging.code import verify_code
    from bonforge.sandbox.config import CodeVerifyConfig
    from bonforge.sandbox.pool import SandboxPool

    spec = {"kind": "stdio", "tests": [{"input": "2 3\n", "output": "5\n"}]}
    problems = pa.Table.from_pylist([{"problem_id": "p", "source": "t", "domain": "code", "question": "",
                                      "tests": json.dumps(spec)}], schema=PROBLEMS)
    programs = ["print(5)\n", "print(6)\n", "print(5)\n", "print(7)\n"]
    cands = pa.Table.from_pylist([{"candidate_id": f"p/t/{i}", "problem_id": "p", "teacher": "t", "sample_index": i,
                                   "text": p} for i, p in enumerate(programs)], schema=CANDIDATES)
    heard: list[tuple[int, int]] = []
    cfg = CodeVerifyConfig(backend="process", pool_size=1, time_limit_s=2.0, memory_mb=256, extraction="raw")
    with SandboxPool(cfg) as pool:
        counted = verify._Counted(pool, lambda d, of: heard.append((d, of)), cands.num_rows)
        out = verify_code(problems, cands, cfg, pool=counted)
    assert out.column("status").to_pylist() == ["passed", "wrong_answer", "passed", "wrong_answer"]
    assert heard == [(1, 4), (2, 4), (3, 4)]  # three programs run (one twice asked): the write gives the 4th


def test_a_verification_shard_holds_at_most_one_sampling_shard(tmp_path):
    """A streaming build verifies a sampling shard as soon as it is written: a verification shard never waits for
    the next sampling shards to fill it (nor holds fewer than ``MIN_SHARD_ROWS``). Control: a teacher with larger
    sampling shards keeps the stage's 256, and so do candidates that no sampled teacher made (a pool); the key is
    the same whatever the shard size."""
    from bonforge.config import load_recipe
    from bonforge.stage import Pending, Ref

    (tmp_path / "p.jsonl").write_text('{"id": "p", "question": "What is 1 + 2?", "answer": "3"}\n')
    (tmp_path / "recipe.yaml").write_text("""
name: shards
problems: {name: toy, source: {path: p.jsonl}, fields: {id: id}}
teachers:
  - {name: small, engine: openai, base_url: "http://127.0.0.1:9/v1", api_key_env: null, model: m, n: 8,
     shard_problems: 8}
  - {name: large, engine: openai, base_url: "http://127.0.0.1:9/v1", api_key_env: null, model: m, n: 8}
  - {name: tiny, engine: openai, base_url: "http://127.0.0.1:9/v1", api_key_env: null, model: m, n: 4,
     shard_problems: 2}
export: {name: toy-genselect}
""")
    recipe = load_recipe(tmp_path / "recipe.yaml")
    problems = Ref("problems", "p" * 64)

    def rows(teacher: str) -> tuple[int, str]:
        node = verify.node(recipe, problems, Pending("candidates", "c" * 64, note={"teacher": teacher}), {"math"})
        return node.stage.shard_rows, node.key

    assert rows("small")[0] == 64 and rows("large")[0] == 256 and rows("pool")[0] == 256
    assert rows("tiny")[0] == verify.MIN_SHARD_ROWS  # not shards of 8: a small build stays one shard (no Ray)
    assert len({key for _, key in map(rows, ("small", "large", "pool"))}) == 1
