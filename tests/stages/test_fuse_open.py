"""FusioN on open-ended problems, stage by stage on small tables: the hard filter on the pools, the fused
answer beside Best-of-N on the same pool, and the comparison that marks the selection scorer."""

from __future__ import annotations

import pyarrow as pa
import pytest

from bonforge.config import BonFilter, FusionConfig
from bonforge.stages.fuse import OPEN_GUIDANCE, build_pools
from bonforge.stages.fuse_open import POOL_ROWS, analyze, comparison

FUSION = FusionConfig.model_validate({"teachers": {"a": 2, "b": 1}, "fusor": {"name": "f", "engine": "openai",
                                                                             "model": "m"}, "export": {"name": "x"}})
VALUES = pa.map_(pa.string(), pa.float64())


def _pool(rows: list[tuple]) -> pa.Table:
    return pa.table({
        "problem_id": [r[0] for r in rows], "question": ["Wie spät ist es?"] * len(rows),
        "domain": ["open"] * len(rows), "candidate_id": [r[1] for r in rows], "teacher": [r[2] for r in rows],
        "text": [r[3] for r in rows], "scores": pa.array([sorted(r[4].items()) for r in rows], VALUES)})


def test_the_hard_filter_keeps_wrong_language_and_low_scores_out_of_the_pools():
    pool = _pool([("p1", "a0", "a", "Es ist drei Uhr.", {"lang": 1.0, "rm": 2.0}),
                  ("p1", "a1", "a", "It is three.", {"lang": 0.0, "rm": 5.0}),  # wrong language
                  ("p1", "a2", "a", "Drei.", {"lang": 1.0, "rm": -9.0}),  # below the minimum
                  ("p1", "b0", "b", "Um drei Uhr.", {"lang": 1.0, "rm": 1.0}),
                  ("p1", "b1", "b", "Unbewertet.", {}),  # unscored: no language value, left out
                  ("p2", "a3", "a", "Nope.", {"lang": 0.0, "rm": 1.0})])  # nothing left: no pool
    out = build_pools(pool, FUSION, BonFilter(language="lang", min={"rm": -1.0})).to_pylist()
    assert [r["problem_id"] for r in out] == ["p1"]
    assert sorted(out[0]["candidate_ids"]) == ["a0", "b0"]
    assert out[0]["prompt"].rstrip().endswith(OPEN_GUIDANCE.strip())
    # without a filter every text may enter (the verified domains' prefilter reads verdict statuses)
    unfiltered = build_pools(pool.append_column("status", pa.array(["ok"] * 6)), FUSION).to_pylist()
    assert len(unfiltered) == 2 and "language of the request" not in unfiltered[0]["prompt"]


def _rows(fused_values: dict | None, values: list[dict]) -> pa.Table:
    ids = [f"c{i}" for i in range(len(values))]
    return pa.Table.from_pylist([{
        "problem_id": "p", "candidate_ids": ids, "teachers": ["a", "b", "a"][:len(ids)],
        "texts": ["Paris is the capital of France, on the Seine.", "The capital is Paris.", "Lyon."][:len(ids)],
        "values": [sorted(v.items()) for v in values],
        "fused_candidate_id": None if fused_values is None else "f0",
        "fused_text": None if fused_values is None else "Paris is the capital of France, on the Seine. Yes.",
        "fused_values": None if fused_values is None else sorted(fused_values.items())}], schema=POOL_ROWS)


def test_fused_answer_beside_best_of_n_on_the_same_pool():
    values = [{"rm": 1.0, "chrf": 40.0, "lang": 1.0}, {"rm": 3.0, "chrf": 20.0, "lang": 1.0},
              {"rm": 3.0, "chrf": 10.0, "lang": 1.0}]
    out = analyze(_rows({"rm": 2.0, "chrf": 50.0, "lang": 1.0}, values), "rm", BonFilter(language="lang"), 16)
    r = out.to_pylist()[0]
    assert r["bon_candidate_id"] == "c1"  # rm 3.0 shared by c1 and c2: the lowest id
    assert dict(r["bon_values"]) == values[1] and dict(r["fused_values"])["chrf"] == 50.0
    assert dict(r["pool_max"]) == {"chrf": 40.0, "lang": 1.0, "rm": 3.0}
    assert dict(r["pool_mean"])["rm"] == pytest.approx(7 / 3)
    assert r["fused_kept"] is True and r["pool_size"] == 3
    assert dict(r["teacher_chars"])["a"] == len("Paris is the capital of France, on the Seine.")
    cmp = comparison(out, "rm")
    assert cmp["selection_scorer"] == "rm" and cmp["scorers"]["rm"]["selection"] is True
    assert cmp["scorers"]["chrf"] == {"n": 1, "fused_mean": 50.0, "bon_mean": 20.0, "pool_mean": pytest.approx(70 / 3),
                                      "fused_at_least_bon": 1.0, "selection": False}
    assert cmp["scorers"]["rm"]["fused_at_least_bon"] == 0.0


def test_a_fused_answer_in_the_wrong_language_or_missing():
    values = [{"rm": 1.0, "lang": 1.0}]
    wrong = analyze(_rows({"rm": 9.0, "lang": 0.0}, values), "rm", BonFilter(language="lang"), 16).to_pylist()[0]
    assert wrong["fused_kept"] is False
    none = analyze(_rows(None, values), "rm", BonFilter(), 16)
    assert none.to_pylist()[0]["fused_kept"] is None and none.to_pylist()[0]["total_chars"] == 0
    assert comparison(none, "rm") == {"problems": 1, "fused": 0}
