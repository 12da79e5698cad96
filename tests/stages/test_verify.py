"""What verification reads of its inputs: the columns judging and the verdict identity use, not the
candidates' reasoning (a thinking model's is many times its answer) or the problems' metadata."""

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
