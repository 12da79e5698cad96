"""A missing gold answer is never a gold answer. In every table format (JSONL with NaN / Infinity / null,
Parquet float NaN and nulls, what pandas writes for a missing value), a maths problem whose answer is missing
stops `bonforge run` with one `error:` line naming the file, the record and the field (exit code 2, nothing
committed), or, with `problems.missing_answers: skip`, is left out and counted in the problems manifest. The
judge and the RL reward give a NaN gold no `correct`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.config import load_recipe
from bonforge.engine import run_node
from bonforge.judging.math import check_answer
from bonforge.rewards.math import compute_score
from bonforge.stages import load
from bonforge.storage.store import StageStore
from pool_recipes import pool_recipe

GOOD = {"question": "What is 1 + 1?", "answer": "2"}


def jsonl(*lines: str) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


def parquet(table: pa.Table, path: Path) -> None:
    pq.write_table(table, path)


def pandas_parquet(path: Path) -> None:  # a float column with a missing value, as pandas writes it
    pd.DataFrame({"question": ["What is 1 + 1?", "What is 2 + 2?"], "answer": [2.0, float("nan")]}).to_parquet(path)


def pandas_jsonl(path: Path) -> None:  # pandas writes NaN as null in JSON
    pd.DataFrame({"question": ["q1", "q2"], "answer": ["2", None]}).to_json(path, orient="records", lines=True)


def pandas_text_jsonl(path: Path) -> None:  # astype(str) first: the missing value becomes the text 'nan'
    df = pd.DataFrame({"question": ["q1", "q2"], "answer": [2.0, float("nan")]})
    df.assign(answer=df.answer.astype(str)).to_json(path, orient="records", lines=True)


# name -> (file name, writer of the file, record named in the error)
CASES = {
    "jsonl NaN": ("p.jsonl", lambda p: p.write_bytes(jsonl(json.dumps(GOOD), '{"question": "q", "answer": NaN}')),
                  "line 2"),
    "jsonl Infinity": ("p.jsonl", lambda p: p.write_bytes(jsonl('{"question": "q", "answer": Infinity}')), "line 1"),
    "jsonl -Infinity": ("p.jsonl", lambda p: p.write_bytes(jsonl('{"question": "q", "answer": -Infinity}')),
                        "line 1"),
    "jsonl null": ("p.jsonl", lambda p: p.write_bytes(jsonl(json.dumps(GOOD), json.dumps(GOOD),
                                                            '{"question": "q", "answer": null}')), "line 3"),
    "jsonl 'nan' text": ("p.jsonl", lambda p: p.write_bytes(jsonl('{"question": "q", "answer": " NaN "}')), "line 1"),
    "jsonl.gz NaN": ("p.jsonl.gz", lambda p: p.write_bytes(__import__("gzip").compress(
        jsonl('{"question": "q", "answer": NaN}'))), "line 1"),
    "parquet float NaN": ("p.parquet", lambda p: parquet(pa.table({"question": ["a", "b"], "answer": [1.5, math.nan]}),
                                                         p), "row 1"),
    "parquet float inf": ("p.parquet", lambda p: parquet(pa.table({"question": ["a"], "answer": [math.inf]}), p),
                          "row 0"),
    "parquet null": ("p.parquet", lambda p: parquet(pa.table({"question": ["a", "b"], "answer": ["1", None]}), p),
                     "row 1"),
    "pandas parquet": ("p.parquet", pandas_parquet, "row 1"),
    "pandas jsonl": ("p.jsonl", pandas_jsonl, "line 2"),
    "pandas astype(str) jsonl": ("p.jsonl", pandas_text_jsonl, "line 2"),
}  # fmt: skip


def write(tmp: Path, name: str, **problems) -> Path:
    file, writer, _ = CASES[name]
    writer(tmp / file)
    fmt = "parquet" if file.endswith(".parquet") else "jsonl"
    return pool_recipe(tmp, "gold", {"format": fmt, "source": {"path": file}, **problems},
                       [{"samples": ["\\boxed{NaN}"]}])


pytestmark = pytest.mark.usefixtures("no_services")

@pytest.mark.parametrize("name", CASES)
def test_a_missing_gold_is_one_error_line(tmp_path, name):
    path = write(tmp_path, name)
    res = CliRunner().invoke(app, ["run", str(path), "--store", str(tmp_path / "store")])
    out = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(out) == 1, (res.exit_code, res.output[-2000:], res.exception)
    file, _, record = CASES[name]
    assert out[0].startswith(f"error: stage problems: {tmp_path / file}, record {record}, field 'answer': "
                             "no gold answer"), out[0]  # fmt: skip
    assert "missing_answers: skip" in out[0]
    assert not list((tmp_path / "store").glob("stages/*/*/manifest.json"))


@pytest.mark.parametrize("name", ["jsonl NaN", "parquet float NaN", "pandas parquet", "jsonl null"])
def test_skip_leaves_the_problem_out_and_counts_it(tmp_path, name):
    write(tmp_path, name, missing_answers="skip")
    recipe = load_recipe(tmp_path / "recipe.yaml")
    man = run_node(StageStore(tmp_path / "store"), load.node(recipe, tmp_path))
    table = StageStore(tmp_path / "store").read("problems", man["key"])
    assert man["left_out"] == {"no_gold_answer": 1}
    assert None not in table.column("answer").to_pylist() and "nan" not in table.column("answer").to_pylist()
    assert man["rows"] == table.num_rows >= 1


def test_only_missing_golds_left_out_is_still_an_error(tmp_path):
    write(tmp_path, "jsonl Infinity", missing_answers="skip")
    res = CliRunner().invoke(app, ["run", str(tmp_path / "recipe.yaml"), "--store", str(tmp_path / "store")])
    assert res.exit_code == 2 and "no problems found (1 left out for a missing gold answer)" in res.output


def test_a_nan_question_or_id_is_no_text(tmp_path):
    (tmp_path / "p.jsonl").write_bytes(jsonl('{"question": NaN, "answer": "1"}'))
    from bonforge.config import DataSource, ProblemsConfig
    from bonforge.errors import DataError
    from bonforge.sources.problems import load_problems

    cfg = ProblemsConfig(source=DataSource(path="p.jsonl"), name="t")
    with pytest.raises(DataError, match="record line 1, field 'question': expected a string, got nan"):
        load_problems(cfg, tmp_path / "p.jsonl")


@pytest.mark.parametrize("gold", ["nan", "NaN", " nan ", "<NA>"])
def test_the_judge_and_the_reward_never_score_a_nan_gold(gold):
    for text in ("\\boxed{NaN}", "nan", "The answer is NaN.", "\\boxed{<NA>}"):
        assert check_answer(text, gold).status == "error"
        assert compute_score("gsm8k", text, gold) == 0.0 or compute_score("gsm8k", text, gold)["score"] == 0.0
