"""The decontamination compute on real benchmark lists and small tables (no store, Ray or Prefect)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

from bonforge.config import Benchmark, DataSource, DecontaminateConfig
from bonforge.errors import DataError
from bonforge.schema import CONTAMINATION
from bonforge.stages.decontaminate import benchmark_table, decontaminate, summary

DATA = Path(os.environ.get("BONFORGE_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))
LISTS = {"aime24": ("math/aime24.jsonl", "id"), "aime25": ("math/aime25.jsonl", "id"),
         "math500": ("math/math500.jsonl", "unique_id")}  # fmt: skip


@pytest.fixture(scope="module")
def benchmarks() -> dict[str, pa.Table]:
    if not (DATA / "math" / "aime24.jsonl").is_file():
        pytest.skip("no data mirror with math/ (set BONFORGE_DATA)")
    return {n: benchmark_table(Benchmark(name=n, source=DataSource(path=p), id=i), DATA / p)
            for n, (p, i) in LISTS.items()}


@pytest.fixture(scope="module")
def gsm8k() -> pa.Table:
    rows = [json.loads(line) for line in (DATA / "gsm8k" / "test.jsonl").read_text().splitlines()]
    return pa.table({"problem_id": [f"gsm8k/{i:05d}" for i in range(len(rows))],
                     "question": [r["question"] for r in rows]})


def mangle(text: str) -> str:
    """The same question with its case and whitespace changed."""
    return "  " + "\n".join(w.upper() if i % 3 else w for i, w in enumerate(text.split(" "))).swapcase() + " \t"


def test_real_gsm8k_overlaps_no_aime_or_math500_item(gsm8k, benchmarks):
    """The count the docs report: 0 of the 1,319 GSM8K test problems share a 13-gram with AIME24/25 or
    MATH-500 (nor an 8-gram), and none repeats another."""
    assert decontaminate(gsm8k, benchmarks).num_rows == 0
    assert decontaminate(gsm8k, benchmarks, ngram=8).num_rows == 0


def test_planted_aime24_problems_are_dropped_with_their_ids(gsm8k, benchmarks):
    aime = benchmarks["aime24"].to_pylist()
    planted = {f"planted/{k}": aime[i] for k, i in enumerate((0, 7, 13, 21, 29))}
    rows = gsm8k.to_pylist()
    for k, (pid, item) in enumerate(planted.items()):
        rows.insert(200 * k + 17, {"problem_id": pid, "question": mangle(item["text"])})
    out = decontaminate(pa.Table.from_pylist(rows), benchmarks)
    assert out.schema == CONTAMINATION
    assert {r["problem_id"]: (r["reason"], r["benchmark"], r["matched_id"]) for r in out.to_pylist()} == {
        pid: ("benchmark", "aime24", item["id"]) for pid, item in planted.items()}
    assert all(len(r["overlap"].split()) == 13 for r in out.to_pylist())
    assert summary(out) == {"dropped": {"aime24": 5}}


def test_ngram_length_duplicates_and_short_items():
    words = "one two three four five six seven eight nine ten eleven twelve thirteen".split()
    problems = pa.table({
        "problem_id": ["p0", "p1", "p2", "p3", "p4"],
        "question": ["Intro: " + " ".join(words[:12]) + " end.",  # a 12-word overlap
                     "What is 2+2?", "what is 2 + 2", "Name a colour!", "NAME  a Colour"],
    })  # fmt: skip
    bench = {"b": pa.table({"id": ["b0", "b1"], "text": [" ".join(words), "Name a colour."]})}
    at13 = {r["problem_id"]: r for r in decontaminate(problems, bench).to_pylist()}
    assert set(at13) == {"p2", "p3", "p4"}  # p0 shares only 12 words
    assert (at13["p2"]["reason"], at13["p2"]["matched_id"]) == ("duplicate", "p1")  # the first one stays
    p3 = at13["p3"]
    assert (p3["reason"], p3["matched_id"], p3["overlap"]) == ("benchmark", "b1", "name a colour")
    at12 = decontaminate(problems, bench, ngram=12, dedup=False).to_pylist()
    assert [(r["problem_id"], r["matched_id"], r["overlap"]) for r in at12 if r["problem_id"] == "p0"] == [
        ("p0", "b0", " ".join(words[:12]))]
    assert "p2" not in {r["problem_id"] for r in at12}  # dedup off


def test_a_window_across_two_problems_is_no_overlap():
    words = [f"w{i}" for i in range(13)]
    problems = pa.table({"problem_id": ["a", "b"], "question": [" ".join(words[:6]), " ".join(words[6:])]})
    assert decontaminate(problems, {"b": pa.table({"id": ["x"], "text": [" ".join(words)]})}).num_rows == 0


def test_benchmark_errors_name_the_record_and_field(tmp_path):
    path = tmp_path / "bench.jsonl"
    path.write_text('{"id": 1, "problem": "ok"}\n{"id": 2, "question": "no problem field"}\n')
    with pytest.raises(DataError, match=r"bench.jsonl, record line 2, field 'problem': missing field"):
        benchmark_table(Benchmark(name="b", source=DataSource(path=str(path))), path)


def test_config_refuses_a_section_with_nothing_to_do():
    with pytest.raises(ValueError, match="nothing to do"):
        DecontaminateConfig(benchmarks=[], dedup=False)
    with pytest.raises(ValueError, match="benchmark names must be unique"):
        DecontaminateConfig(benchmarks=[Benchmark(name="a", source=DataSource(path="x"))] * 2)
