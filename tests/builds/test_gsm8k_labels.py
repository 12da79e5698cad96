"""Our math verdicts reproduce GSM8K's published `is_correct` labels on every candidate."""

from pathlib import Path

import pyarrow as pa

from bonforge.config import DataSource, MathVerifyConfig, PoolTeacher, ProblemsConfig, FieldMap
from bonforge.stages.load_pool import import_pool
from bonforge.stages.load import load_problems
from bonforge.judging.math import verify_math

KEYS = ["6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification"]


def test_verdicts_agree_with_published_labels_on_all_5276_candidates(gsm8k_pool: Path):
    problems = load_problems(ProblemsConfig(source=DataSource(path=str(gsm8k_pool)), name="gsm8k",
                                            fields=FieldMap(answer="ground_truth")), gsm8k_pool)
    assert problems.num_rows == 1319
    cands = pa.concat_tables([
        import_pool(PoolTeacher(engine="pool", name=k, source=DataSource(path=str(gsm8k_pool)), samples=k,
                                text="solution", label="is_correct"), gsm8k_pool, problems)
        for k in KEYS
    ])
    assert cands.num_rows == 5276
    verdicts = verify_math(cands, problems, MathVerifyConfig(patterns=[r"(?m)^A:\s*(.+?)\s*$"]))
    labels = dict(zip(cands.column("candidate_id").to_pylist(), cands.column("reference_correct").to_pylist()))
    disagree = [(r["candidate_id"], r["extracted"], r["status"]) for r in verdicts.to_pylist()
                if r["correct"] != labels[r["candidate_id"]]]
    assert disagree == []
    assert sum(labels.values()) == 2001
