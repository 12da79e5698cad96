"""Early stopping without rounds (``bonforge.flows.early.draw``) on its own: a problem draws what the rule of the
rounds draws, and a sample judged without a label (``schema.NO_LABEL``) is unknown: not right, and judged again
when its problem draws more, so that a label it then gets decides."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from bonforge.config import load_recipe
from bonforge.flows import early
from bonforge.judging import math as verify_math
from bonforge.llm.base import Completion, problem_seed
from bonforge.storage.store import StageStore

RIGHT = [True, True, False, True, False, True, False, False]  # sample k of the problem is right iff RIGHT[k]


class Engine:
    """Answers "What is 1 + 2?" right (3) for the samples ``RIGHT`` says, else 4."""

    name = "fake"

    def __init__(self, teacher):
        self.teacher, self.asked = teacher, []

    def start(self) -> None:
        pass

    def generate(self, requests, progress=None):
        out = []
        for r in requests:
            base = problem_seed(self.teacher.seed, r.id)
            self.asked += [r.seed - base + i for i in range(r.n)]
            out.append([Completion(r.id, i, f"\\boxed{{{3 if RIGHT[r.seed - base + i] else 4}}}", None, "stop", 5, 3,
                                   r.seed + i, self.name, self.teacher.model) for i in range(r.n)])
        return out

    def close(self) -> None:
        pass


def recipe(folder: Path):
    (folder / "p.jsonl").write_text('{"id": "p", "question": "What is 1 + 2?", "answer": "3"}\n')
    (folder / "recipe.yaml").write_text("""
name: unknown
problems: {name: toy, source: {path: p.jsonl}, fields: {id: id}}
teachers:
  - {name: t, engine: openai, base_url: "http://127.0.0.1:9/v1", api_key_env: null, model: m, n: 8}
filter: {max_pass_rate: 0.25, early_stop: true}
export: {name: toy-genselect}
""")
    return load_recipe(folder / "recipe.yaml")


PROBLEMS = pa.table({"problem_id": ["p"], "domain": ["math"], "question": ["What is 1 + 2?"], "answer": ["3"],
                     "tests": pa.nulls(1, pa.string())})


def drawn(tmp_path: Path, monkeypatch, no_label_once: set[int]) -> tuple[list[int], list[int]]:
    """The samples drawn (in the order asked) with the judge failing (``infra_error``) on the first verdict of each
    sample of ``no_label_once``; the samples judged, in order."""
    r = recipe(tmp_path)
    engine, judged, real = Engine(r.teachers[0]), [], verify_math.verify_math

    def flaky(candidates, problems, cfg):
        out = real(candidates, problems, cfg).to_pylist()
        for row in out:
            index = int(row["candidate_id"].rsplit("/", 1)[1])
            if index in no_label_once and index not in judged:
                row.update(status="infra_error", correct=False)
            judged.append(index)
        return pa.Table.from_pylist(out, schema=real(candidates, problems, cfg).schema)

    monkeypatch.setattr(verify_math, "verify_math", flaky)
    got = early.draw(r, StageStore(tmp_path / "store"), PROBLEMS, {"t": engine}, {"math"})
    assert sorted(i for _, i in got.samples["t"]) == engine.asked
    return engine.asked, judged


def test_the_problem_draws_what_the_rounds_draw(tmp_path, monkeypatch):
    # three right are too easy (3 / 8 > 0.25): 0, 1, 2 first (two right), then one more: 3 (right): closed
    assert drawn(tmp_path, monkeypatch, set()) == ([0, 1, 2, 3], [0, 1, 2, 3])


def test_a_sample_without_a_label_is_unknown_and_judged_again(tmp_path, monkeypatch):
    # sample 0 without a label: one right of 0, 1, 2, so two more (3, 4); with them sample 0 is judged again,
    # right: three right, closed (counted wrong, it would have drawn sample 5 as well)
    asked, judged = drawn(tmp_path, monkeypatch, {0})
    assert asked == [0, 1, 2, 3, 4]
    assert sorted(judged) == [0, 0, 1, 2, 3, 4]
