"""The decontamination compute on real benchmark lists and small tables (no store, Ray or Prefect)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow as pa
import pytest

from bonforge.config import Benchmark, DataSource, DecontaminateConfig, NearDuplicatesConfig, load_recipe
from bonforge.errors import ConfigError, DataError
from bonforge.schema import CONTAMINATION
from bonforge.stages.decontaminate import benchmark_table, decontaminate, summary

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "gsm8k-decontaminated.yaml"
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


NEAR = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. She kept "
        "6 clips for herself and gave the rest to her brother. How many clips did Natalia sell altogether?")


def test_near_duplicates_beside_benchmarks_and_exact_duplicates():
    problems = pa.table({
        "problem_id": ["p5", "p1", "p2", "p3", "p4", "p0"],
        "question": [NEAR.replace("friends", "classmates"),  # a rewording of p1's; 0.84 from p0's: stays
                     NEAR, NEAR.upper(),  # an exact duplicate (dropped as before, not as a near one)
                     NEAR.replace("48", "49"),  # another problem: other numbers
                     "Name a colour.",  # a benchmark item
                     NEAR.replace("brother", "sister")],  # the earliest id of its kind: p1 is dropped for it
    })  # fmt: skip
    bench = {"b": pa.table({"id": ["b0"], "text": ["Name a colour!"]})}
    exact = {r["problem_id"]: (r["reason"], r["matched_id"]) for r in decontaminate(problems, bench).to_pylist()}
    assert exact == {"p2": ("duplicate", "p1"), "p4": ("benchmark", "b0")}  # unchanged without near_duplicates
    out = decontaminate(problems, bench, near=NearDuplicatesConfig())
    assert out.schema == CONTAMINATION
    got = {r["problem_id"]: (r["reason"], r["matched_id"], r["overlap"]) for r in out.to_pylist()}
    assert got == {"p2": ("duplicate", "p1", None), "p4": ("benchmark", "b0", "name a colour"),
                   "p1": ("near_duplicate", "p0", None)}  # fmt: skip
    assert summary(out) == {"dropped": {"b": 1, "duplicate": 1, "near_duplicate": 1}}
    shuffled = problems.take([3, 0, 5, 1, 4, 2])
    assert decontaminate(shuffled, bench, near=NearDuplicatesConfig()).sort_by("problem_id") == out.sort_by(
        "problem_id")


def test_near_duplicates_are_off_by_default_and_leave_the_key_alone():
    cfg = DecontaminateConfig()
    assert cfg.near_duplicates is None and "near_duplicates" not in cfg.key_config()
    on = DecontaminateConfig(dedup=False, near_duplicates={"threshold": 0.9})  # enough on its own
    assert on.key_config()["near_duplicates"] == {"threshold": 0.9, "num_perm": 128}


@pytest.mark.parametrize("override, match", [
    ("decontaminate.near_duplicates.threshold=1.5", r"decontaminate\.near_duplicates\.threshold: Input should be "
                                                    r"less than or equal to 1"),
    ("decontaminate.near_duplicates.threshold=0", r"decontaminate\.near_duplicates\.threshold: Input should be "
                                                  "greater than 0"),
    ("decontaminate.near_duplicates.threshold=high", r"decontaminate\.near_duplicates\.threshold: Input should be a "
                                                     "valid number"),
    ("decontaminate.near_duplicates.num_perm=8", r"decontaminate\.near_duplicates\.num_perm: Input should be "
                                                 "greater than or equal to 16"),
    ("decontaminate.near_duplicates.treshold=0.9", r"decontaminate\.near_duplicates\.treshold.*threshold"),
], ids=["above-1", "zero", "text", "few-perms", "typo"])  # fmt: skip
def test_a_bad_near_duplicates_setting_is_one_error_line(override, match):
    with pytest.raises(ConfigError) as err:
        load_recipe(RECIPE, ["decontaminate.near_duplicates={}", override])
    assert len(str(err.value).strip().splitlines()) == 1 and re.search(match, str(err.value)), str(err.value)
    assert load_recipe(RECIPE, ["decontaminate.near_duplicates={threshold: 0.9}"]).decontaminate.near_duplicates
