"""Recipes over brought problems, built end to end: GSM8K with AIME24 problems planted among its problems
(dropped by the contamination stage, named in the `contamination` view and the report), GSM8K with reworded
repeats (near duplicates), and the CPU code
recipe over a CodeContests-shaped JSONL made from the APPS problems (Docker sandbox)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from code_shapes import codecontests, write_jsonl

from bonforge.config import load_recipe
from bonforge.flows.build import build
from bonforge.storage.catalog import connect
from bonforge.storage.store import StageStore

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
PLANTED = (0, 7, 13, 21, 29)  # rows of aime24.jsonl
pytestmark = pytest.mark.slow


def test_planted_aime24_problems_are_dropped_and_named(tmp_path, data_dir):
    pool = [json.loads(line) for line in (data_dir / "gsm8k" / "example_model_solutions.jsonl").open()][:120]
    aime = [json.loads(line) for line in (data_dir / "math" / "aime24.jsonl").open()]
    planted = {}
    for k, i in enumerate(PLANTED):  # whitespace and case changed
        text = "\n  ".join(w.swapcase() if j % 2 else w for j, w in enumerate(aime[i]["problem"].split(" ")))
        pool.insert(25 * k + 3, {**pool[0], "question": text})
        planted[f"gsm8k/{25 * k + 3:05d}"] = str(aime[i]["id"])
    path = write_jsonl(tmp_path / "planted.jsonl", pool)
    teachers = ", ".join(f"{{name: {s}, engine: pool, source: {{path: {path}}}, samples: {s}, text: solution, "
                         "label: is_correct}" for s in ("6b_finetuning", "6b_verification"))
    recipe = load_recipe(RECIPES / "gsm8k-decontaminated.yaml",
                         [f"problems.source={{path: {path}}}", f"teachers=[{teachers}]"])
    record = build(recipe, str(tmp_path / "store"), str(RECIPES))
    store = StageStore(tmp_path / "store")
    con = connect(store)
    rows = con.sql("SELECT problem_id, reason, benchmark, matched_id FROM contamination ORDER BY problem_id").fetchall()
    assert rows == [(pid, "benchmark", "aime24", aid) for pid, aid in sorted(planted.items())]
    kept = {p for (p,) in con.sql("SELECT problem_id FROM problems").fetchall()}
    assert len(kept) == 120 and not kept & set(planted)
    assert store.manifest("contamination", record["stages"]["contamination"][0])["dropped"] == {"aime24": 5}
    assert "aime24</td><td>5" in Path(record["report"]).read_text()


def test_reworded_problems_are_dropped_as_near_duplicates(tmp_path, data_dir):
    """Three GSM8K problems repeated later in the table, each reworded (a word dropped, case and spacing changed),
    and one with a number changed: the rewordings are dropped for the originals, named and counted; the other
    number stays."""
    pool = [json.loads(line) for line in (data_dir / "gsm8k" / "example_model_solutions.jsonl").open()][:60]
    reworded = {}
    for i in (4, 11, 30):
        words = pool[i]["question"].split(" ")
        at = next(k for k, w in enumerate(words) if k > 2 and w.isalpha())
        reworded[f"gsm8k/{len(pool):05d}"] = f"gsm8k/{i:05d}"
        pool.append({**pool[i], "question": "  ".join(words[:at] + words[at + 1 :]).upper()})
    number = pool[20]["question"].replace(next(w for w in pool[20]["question"].split() if w.isdigit()), "999", 1)
    pool.append({**pool[20], "question": number})
    path = write_jsonl(tmp_path / "reworded.jsonl", pool)
    teachers = ", ".join(f"{{name: {s}, engine: pool, source: {{path: {path}}}, samples: {s}, text: solution, "
                         "label: is_correct}" for s in ("6b_finetuning", "6b_verification"))
    recipe = load_recipe(RECIPES / "gsm8k-decontaminated.yaml",
                         [f"problems.source={{path: {path}}}", f"teachers=[{teachers}]",
                          "decontaminate.near_duplicates={}"])  # fmt: skip
    record = build(recipe, str(tmp_path / "store"), str(RECIPES))
    store = StageStore(tmp_path / "store")
    con = connect(store)
    rows = con.sql("SELECT problem_id, reason, matched_id FROM contamination ORDER BY problem_id").fetchall()
    assert rows == [(pid, "near_duplicate", orig) for pid, orig in sorted(reworded.items())]
    assert con.sql("SELECT count(*) FROM problems").fetchall() == [(61,)]  # 60 + the one with another number
    assert store.manifest("contamination", record["stages"]["contamination"][0])["dropped"] == {"near_duplicate": 3}
    assert "near_duplicate</td><td>3" in Path(record["report"]).read_text()


@pytest.mark.docker
def test_codecontests_cpu_recipe_reproduces_labels(tmp_path, data_dir, sandbox_image):
    rows, _ = codecontests(data_dir)
    path = write_jsonl(tmp_path / "codecontests-apps.jsonl", rows + [rows[0]])  # a repeated problem...
    rows_again = [json.loads(line) for line in path.open()]
    rows_again[-1].update(name="apps-0001-again", coderl=[])
    write_jsonl(path, rows_again)
    recipe = load_recipe(RECIPES / "codecontests-cpu.yaml", [f"problems.source={{path: {path}}}",
                                                             f"teachers.coderl.source={{path: {path}}}"])  # fmt: skip
    build(recipe, str(tmp_path / "store"), str(RECIPES))
    con = connect(StageStore(tmp_path / "store"))
    assert con.sql("SELECT problem_id, reason, matched_id FROM contamination").fetchall() == [
        ("apps-0001-again", "duplicate", "apps-0001")]  # ...is left out
    got = con.sql("SELECT v.teacher, v.correct, c.reference_correct FROM verdicts v JOIN candidates c "
                  "USING (candidate_id)").fetchall()  # fmt: skip
    coderl = [(ok, ref) for t, ok, ref in got if t == "coderl"]
    assert len(coderl) == sum(len(r["coderl"]) for r in rows) and all(ok == ref for ok, ref in coderl)
    assert all(ok for t, ok, _ in got if t == "reference")
