"""Dataset versions: immutable, content-addressed, with lineage and checksums; verl format."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bonforge.schema import GENSELECT
from bonforge.storage.datasets import publish
from bonforge.storage.fs import sha256_file
from bonforge.storage.export import VERL_SCHEMA, formats


def genselect(n: int) -> pa.Table:
    return pa.Table.from_pylist([{
        "prompt_id": f"p{i}#0", "problem_id": f"p{i}", "prompt_index": 0, "candidate_ids": ["a", "b", "c"],
        "n_candidates": 3, "correct_indices": [1], "prompt": f"prompt {i}", "n_tokens": 5, "token_counter": "estimate",
    } for i in range(n)], schema=GENSELECT)


def test_verl_rows():
    t = formats(genselect(2), ["verl", "plain"], "bonforge/x")
    assert t["verl"].schema == VERL_SCHEMA and t["plain"].num_rows == 2
    row = t["verl"].to_pylist()[1]
    assert row["prompt"] == [{"role": "user", "content": "prompt 1"}]
    assert row["reward_model"] == {"style": "rule", "ground_truth": "[1]"}
    assert row["extra_info"]["problem_id"] == "p1" and row["ability"] == "genselect"


def test_identical_content_reuses_the_version_and_new_content_gets_the_next(tmp_path):
    lineage = {"stages": {"genselect": ["k1"]}}
    v1 = publish(tmp_path, "ds", formats(genselect(3), ["verl", "plain"], "x"), lineage)
    again = publish(tmp_path, "ds", formats(genselect(3), ["verl", "plain"], "x"), {"stages": {"genselect": ["k9"]}})
    v2 = publish(tmp_path, "ds", formats(genselect(4), ["verl", "plain"], "x"), lineage)
    assert (v1["version"], again["version"], v2["version"]) == (1, 1, 2)
    assert v1["reused"] is False and again["reused"] is True
    assert sorted(p.name for p in (tmp_path / "datasets" / "ds").iterdir()) == ["latest", "v1", "v2"]
    man = json.loads((tmp_path / "datasets" / "ds" / "v1" / "manifest.json").read_text())
    assert man["stages"] == {"genselect": ["k1"]}  # v1's lineage is untouched by the reuse
    for name, meta in man["files"].items():
        path = tmp_path / "datasets" / "ds" / "v1" / name
        assert sha256_file(path) == meta["sha256"] and pq.read_metadata(path).num_rows == meta["rows"]
    # nothing half-written is left beside the versions
    assert sorted(p.name for p in (tmp_path / "datasets" / "ds").iterdir()) == ["latest", "v1", "v2"]


def test_stream_of_shards_equals_one_table(tmp_path):
    """Export streams genselect shard by shard: the same rows and indices as one whole table (one row
    group per shard, so the bytes differ)."""
    from bonforge.storage.export import stream

    whole = genselect(7)
    shards = [whole.slice(0, 3), whole.slice(3, 0), whole.slice(3)]
    one = publish(tmp_path / "a", "ds", formats(whole, ["verl", "plain"], "x"), {})
    many = publish(tmp_path / "b", "ds", stream(shards, ["verl", "plain"], "x"), {})
    assert one["files"]["verl/train.parquet"]["rows"] == many["files"]["verl/train.parquet"]["rows"] == 7
    for fmt in ("verl", "plain"):
        a, b = (pq.read_table(tmp_path / d / "datasets" / "ds" / "v1" / fmt / "train.parquet") for d in "ab")
        assert a.equals(b)
    verl = pq.read_table(tmp_path / "b" / "datasets" / "ds" / "v1" / "verl" / "train.parquet")
    assert [r["index"] for r in verl.column("extra_info").to_pylist()] == list(range(7))


def test_ground_truth_is_the_json_list_of_correct_indices():
    t = genselect(1).set_column(5, "correct_indices", pa.array([[0, 2, 11]], pa.list_(pa.int32())))
    assert json.loads(formats(t, ["verl"], "x")["verl"]["reward_model"][0]["ground_truth"].as_py()) == [0, 2, 11]


def test_stream_refuses_shards_out_of_problem_order():
    import pytest

    from bonforge.storage.export import stream

    whole = genselect(4)
    with pytest.raises(ValueError, match="out of problem order"):
        list(stream([whole.slice(2), whole.slice(0, 2)], ["plain"], "x"))


def test_manifest_carries_the_trainers_section_and_it_is_part_of_the_content(tmp_path):
    from bonforge.storage.export import trainers

    section = trainers("genselect", "verl/train.parquet", 16384)
    assert section["verl"]["overrides"] == [
        "reward.custom_reward_function.path=pkg://bonforge.rewards.genselect",
        "reward.custom_reward_function.name=compute_score",
        "data.reward_fn_key=data_source",
        "data.max_prompt_length=16384",
    ]
    assert section["verl"]["legacy_overrides"][0] == "custom_reward_function.path=pkg://bonforge.rewards.genselect"
    assert section["trl"]["reward_funcs"] == "bonforge.rewards.genselect.genselect_reward"
    v1 = publish(tmp_path, "ds", formats(genselect(2), ["verl"], "x"), {}, trainers=section)
    man = json.loads((tmp_path / "datasets" / "ds" / "v1" / "manifest.json").read_text())
    assert man["trainers"] == section
    math = trainers("math", "verl/train.parquet")
    other = publish(tmp_path, "ds", formats(genselect(2), ["verl"], "x"), {}, trainers=math)
    assert (v1["version"], other["version"]) == (1, 2)  # same files, other instructions: a new version


def kept_problems(domain: str = "math") -> pa.Table:
    return pa.Table.from_pylist([
        {"problem_id": "gsm8k/2", "domain": domain, "question": "Two plus {x}?", "pass_rate": 0.25,
         "answer": "He has 2 + 2 = 4 apples.\nA: 4", "tests": '{"kind": "stdio", "tests": []}', "n": 4,
         "n_correct": 1, "pass_at_k": [{"key": 1, "value": 0.25}, {"key": 2, "value": 0.5}], "teachers": ["a", "b"]},
        {"problem_id": "gsm8k/1", "domain": domain, "question": "One?", "pass_rate": 0.5, "answer": "#### 1,000",
         "tests": '{"kind": "stdio", "tests": []}', "n": 2, "n_correct": 1, "pass_at_k": [{"key": 1, "value": 0.5}],
         "teachers": ["a"]},
    ])  # fmt: skip


def test_rl_rows_carry_the_gold_answer_the_prompt_and_the_checking_settings():
    from bonforge.config import MathVerifyConfig
    from bonforge.sandbox.config import CodeVerifyConfig
    from bonforge.storage.export import RL_SCHEMA, to_rl

    verify = {"math": MathVerifyConfig(patterns=[r"(?m)^A:\s*(.+?)\s*$", r"####\s*(.+?)\s*$"]),
              "code": CodeVerifyConfig()}
    t = to_rl(kept_problems(), "bonforge/gsm8k", {"math": "Solve: {question}"}, verify)
    assert t.schema == RL_SCHEMA
    first, second = t.to_pylist()
    assert first["extra_info"]["problem_id"] == "gsm8k/1" and first["extra_info"]["index"] == 0  # problem order
    assert first["reward_model"] == {"style": "rule", "ground_truth": "1,000"}  # the gold final answer
    assert second["reward_model"]["ground_truth"] == "4"
    assert second["extra_info"]["solution"] == "He has 2 + 2 = 4 apples.\nA: 4"  # the solution as stored
    assert second["prompt"] == [{"role": "user", "content": "Solve: Two plus {x}?"}]  # other braces stay
    assert (second["ability"], second["data_source"]) == ("math", "bonforge/gsm8k")
    assert second["extra_info"]["pass_rate"] == 0.25
    assert {k: second["extra_info"][k] for k in ("n_samples", "n_correct", "pass_at_k", "measured_on")} == {
        "n_samples": 4, "n_correct": 1, "pass_at_k": [{"k": 1, "value": 0.25}, {"k": 2, "value": 0.5}],
        "measured_on": ["a", "b"]}  # the difficulty a trainer filters or weights by
    assert MathVerifyConfig(**json.loads(second["extra_info"]["verify"])) == verify["math"]
    code = to_rl(kept_problems("code"), "bonforge/h", {"code": "{question}"}, verify).to_pylist()
    assert code[0]["reward_model"]["ground_truth"] == '{"kind": "stdio", "tests": []}'
    assert code[0]["extra_info"]["solution"] == "#### 1,000"  # a code problem's reference program, as stored
    assert CodeVerifyConfig(**json.loads(code[0]["extra_info"]["verify"])).time_limit_s == 3.0


def _jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_rl_ground_truth_is_gsm8ks_final_answer_on_every_real_row(data_dir):
    """All 1,319 GSM8K test golds with the GSM8K recipes' patterns: the text after ``####``; the reward scores the
    gold's own worked solution 1 against it."""
    from bonforge.config import load_recipe
    from bonforge.rewards.math import compute_score
    from bonforge.storage.export import to_rl

    rows = _jsonl(data_dir / "gsm8k" / "test.jsonl")
    cfg = load_recipe(Path(__file__).parents[2] / "recipes" / "gsm8k-genselect.yaml").verify.math
    kept = pa.Table.from_pylist([{"problem_id": f"gsm8k/{i:04d}", "domain": "math", "question": r["question"],
                                  "answer": r["answer"], "tests": None, "pass_rate": 0.5, "n": 2, "n_correct": 1,
                                  "pass_at_k": [], "teachers": ["a"]} for i, r in enumerate(rows)])  # fmt: skip
    out = to_rl(kept, "bonforge/gsm8k", {"math": "{question}"}, {"math": cfg}).to_pylist()
    assert [r["reward_model"]["ground_truth"] for r in out] == [r["answer"].split("####")[-1].strip() for r in rows]
    assert [r["extra_info"]["solution"] for r in out] == [r["answer"] for r in rows]
    assert out[0]["reward_model"]["ground_truth"] == "18"
    for r in out[:20]:
        got = compute_score("bonforge/gsm8k", r["extra_info"]["solution"], r["reward_model"]["ground_truth"],
                            r["extra_info"])
        assert got["score"] == 1.0, r["extra_info"]["problem_id"]


def test_math_gold_answer_is_the_last_box_of_a_worked_solution(data_dir):
    """MATH-500's worked solutions: the last boxed answer, as the maths judge reads golds: the published
    ``answer`` field on every row."""
    from bonforge.config import MathVerifyConfig
    from bonforge.judging.math_rules import gold_answer

    cfg = MathVerifyConfig().model_dump_json()
    rows = _jsonl(data_dir / "math" / "math500.jsonl")
    got = [gold_answer(r["solution"], cfg) for r in rows]
    assert got == [r["answer"] for r in rows]  # all 500
    assert gold_answer("So $x = \\boxed{\\frac{1}{2}}$.\nDone.", cfg) == "\\frac{1}{2}"
    assert gold_answer("  42 ", cfg) == "42"  # a plain answer stays itself


def test_rl_export_refuses_a_kept_problem_without_ground_truth():
    import pytest

    from bonforge.config import MathVerifyConfig
    from bonforge.errors import DataError
    from bonforge.sandbox.config import CodeVerifyConfig
    from bonforge.storage.export import to_rl

    t = kept_problems("code").set_column(5, "tests", pa.array([None, "{}"], pa.string()))
    with pytest.raises(DataError, match=r"problems, record gsm8k/2, field 'tests': a kept problem has no ground truth"):
        to_rl(t, "x", {"code": "{question}"}, {"math": MathVerifyConfig(), "code": CodeVerifyConfig()})


def test_a_stream_that_fails_part_way_publishes_nothing_and_leaves_nothing(tmp_path):
    """The first part's files are being written on their threads when the second part fails."""
    import pytest

    def parts():
        yield formats(genselect(2000), ["verl", "plain"], "x")
        raise ValueError("shard 2 is bad")

    with pytest.raises(ValueError, match="shard 2 is bad"):
        publish(tmp_path, "ds", parts(), {"stages": {}})
    assert list((tmp_path / "datasets" / "ds").iterdir()) == []  # no version, no leftover
    part = formats(genselect(2000), ["verl", "plain"], "x")
    good = publish(tmp_path, "ds", [part, part], {"stages": {}})
    assert good["version"] == 1 and good["files"]["verl/train.parquet"]["rows"] == 4000
    for fmt in ("verl", "plain"):  # each file holds its parts in order
        got = pq.read_table(tmp_path / "datasets" / "ds" / "v1" / fmt / "train.parquet")
        assert got.equals(pa.concat_tables([part[fmt], part[fmt]]))


def test_the_rl_export_reads_each_kept_problem_s_difficulty_from_problem_stats(store):
    """The RL file's difficulty fields come from the build's own ``problem_stats`` (the overall row, with the
    teachers it was measured on from the per-teacher rows), through the export's SQL over the store."""
    from bonforge.config import MathVerifyConfig
    from bonforge.engine.shards import StoreInputs
    from bonforge.sandbox.config import CodeVerifyConfig
    from bonforge.schema import PROBLEM_STATS, PROBLEMS, conform
    from bonforge.stage import Ref
    from bonforge.stages.problem_stats import score
    from bonforge.config import FilterConfig, ScoreConfig
    from bonforge.storage.export import rl_parts

    problems = conform(pa.Table.from_pylist([{"problem_id": p, "source": "s", "domain": "math", "question": f"{p}?",
                                              "answer": "1"} for p in ("a", "b")]), PROBLEMS)
    verdicts = pa.Table.from_pylist([
        {"problem_id": p, "teacher": t, "candidate_id": f"{p}/{t}/{i}", "correct": ok, "reward": float(ok),
         "extracted": "1" if ok else "2"}
        for p, oks in (("a", [True, False, False, False]), ("b", [True, True, True, True]))
        for i, (t, ok) in enumerate(zip(["x", "x", "y", "y"], oks))])
    stats = score(verdicts, ScoreConfig(), FilterConfig())
    assert stats.schema == PROBLEM_STATS
    refs = {}
    for name, table in (("problems", problems), ("problem_stats", stats)):
        store.write_shard(name, "k", 0, table)
        refs[name] = [Ref(name, "k", store.commit(name, "k", 1, version="1", config={}, upstream={}))]
    verify = {"math": MathVerifyConfig(), "code": CodeVerifyConfig()}
    first = next(rl_parts(StoreInputs(store, refs), "x", {"math": "{question}"}, verify))  # the problems part
    (row,) = first["rl"].to_pylist()  # b is too easy: only a is kept
    info = row["extra_info"]
    assert (info["problem_id"], info["pass_rate"], info["n_samples"], info["n_correct"]) == ("a", 0.25, 4, 1)
    assert info["measured_on"] == ["x", "y"]
    assert info["pass_at_k"] == [{"k": 1, "value": 0.25}, {"k": 2, "value": 0.5}, {"k": 4, "value": 1.0}]


def test_the_rl_export_leaves_out_candidates_whose_verdict_is_no_label(store):
    """The RL dataset's candidates (for off-policy best-of-N) hold no row whose verdict is no label
    (``infra_error``, ``sandbox_error``): nothing is known of those, so no reward may be read off them."""
    from bonforge.config import FilterConfig, MathVerifyConfig, ScoreConfig
    from bonforge.engine.shards import StoreInputs
    from bonforge.sandbox.config import CodeVerifyConfig
    from bonforge.schema import CANDIDATES, PROBLEMS, VERDICTS, conform
    from bonforge.stage import Ref
    from bonforge.stages.problem_stats import score
    from bonforge.storage.export import rl_parts

    problems = conform(pa.Table.from_pylist([{"problem_id": "a", "source": "s", "domain": "code", "question": "a?",
                                              "tests": "{}"}]), PROBLEMS)  # fmt: skip
    statuses = ["passed", "wrong_answer", "infra_error", "sandbox_error", "wrong_answer"]
    ids = [f"a/x/{i}" for i in range(len(statuses))]
    candidates = conform(pa.Table.from_pylist([{"candidate_id": c, "problem_id": "a", "teacher": "x",
                                                "sample_index": i, "text": "t"} for i, c in enumerate(ids)]),
                         CANDIDATES)  # fmt: skip
    verdicts = conform(pa.Table.from_pylist([
        {"candidate_id": c, "problem_id": "a", "teacher": "x", "correct": s == "passed", "reward": float(s == "passed"),
         "status": s, "tests_passed": int(s == "passed"), "tests_total": 1, "latency_ms": 1.0}
        for c, s in zip(ids, statuses, strict=True)]), VERDICTS)  # fmt: skip
    refs = {}
    for name, table in (("problems", problems), ("candidates", candidates), ("verdicts", verdicts),
                        ("problem_stats", score(verdicts, ScoreConfig(), FilterConfig()))):  # fmt: skip
        store.write_shard(name, "k", 0, table)
        refs[name] = [Ref(name, "k", store.commit(name, "k", 1, version="1", config={}, upstream={}))]
    verify = {"math": MathVerifyConfig(), "code": CodeVerifyConfig()}
    parts = list(rl_parts(StoreInputs(store, refs), "x", {"code": "{question}"}, verify))
    (row,) = parts[0]["rl"].to_pylist()
    assert (row["extra_info"]["n_samples"], row["extra_info"]["pass_rate"]) == (3, 1 / 3)  # the 3 labelled
    got = pa.concat_tables([p["candidates"] for p in parts if "candidates" in p])
    assert sorted(got.column("status").to_pylist()) == ["passed", "wrong_answer", "wrong_answer"]
