"""FusioN's pools (``stages.fuse.build_pools``): seeded by the recipe's seed and the problem alone, so the same
inputs give the same pools whatever order their rows come in, another seed other pools, and each teacher gives
the candidates the recipe asks of it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from bonforge.config import load_recipe
from bonforge.stages.fuse import build_pools

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "gsm8k-fusion.yaml"


def _pool(teachers: list[str], problems: int = 30, per_teacher: int = 6) -> pa.Table:
    rows = [{"problem_id": f"p{p:02d}", "question": f"What is {p} + 1?", "domain": "math",
             "candidate_id": f"p{p:02d}/{t}/{i}", "teacher": t, "text": f"{t} says {p + i} (answer {i})",
             "status": "correct" if i % 2 else "wrong_answer"}
            for p in range(problems) for t in teachers for i in range(per_teacher)]  # fmt: skip
    return pa.Table.from_pylist(rows)


def test_the_same_inputs_give_the_same_pools_in_any_row_order_and_another_seed_others():
    cfg = load_recipe(str(RECIPE)).fusion
    pool = _pool(sorted(cfg.teachers))
    a = build_pools(pool, cfg)
    shuffled = pool.take(list(reversed(range(pool.num_rows))))
    assert a.equals(build_pools(pool, cfg)) and a.equals(build_pools(shuffled, cfg))
    other = build_pools(pool, cfg.model_copy(update={"seed": cfg.seed + 1}))
    assert other.column("candidate_ids").to_pylist() != a.column("candidate_ids").to_pylist()
    for row in a.to_pylist():  # each teacher's count, its own candidates, the prompt in the pool's order
        assert {t: row["teachers"].count(t) for t in cfg.teachers} == cfg.teachers
        assert [c.split("/")[1] for c in row["candidate_ids"]] == row["teachers"]
        said = [row["prompt"].index(f"### Response {i}\n") for i in range(len(row["candidate_ids"]))]
        assert said == sorted(said)
    orders = {tuple(row["teachers"]) for row in a.to_pylist()}
    assert len(orders) > 1  # shuffled: the teachers' order differs between problems
