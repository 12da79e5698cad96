"""The Python API as a notebook uses it: build a tiny recipe of one's own data with ``bonforge.build``, then
read the store with ``bonforge.open``: runs, SQL and stages as Arrow tables (and pandas), datasets."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys

import pyarrow as pa
import pytest

import bonforge
from bonforge.storage.run_record import RunRecord
from bonforge.errors import ConfigError, StoreError

PROBLEMS = [("What is 2 + 3?", "5"), ("What is 4 + 4?", "8"), ("What is 3 * 3?", "9"), ("What is 7 - 2?", "5")]
SAMPLES = {0: ["2 + 3 = 5. A: 5", "A: 6"], 1: ["A: 8", "A: 8"], 2: ["A: 6", "3 * 3 = 9. A: 9"],
           3: ["A: 4", "A: 5", "A: 9"]}


@pytest.fixture(scope="module")
def ray_session():
    import ray

    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def notebook(tmp_path_factory, shared_prefect, ray_session):
    folder = tmp_path_factory.mktemp("notebook")
    (folder / "problems.jsonl").write_text("".join(json.dumps({"question": q, "answer": a}) + "\n"
                                                   for q, a in PROBLEMS))
    (folder / "generations.jsonl").write_text("".join(json.dumps({"question": PROBLEMS[i][0], "samples": s}) + "\n"
                                                      for i, s in SAMPLES.items()))
    recipe = {"name": "tiny", "problems": {"name": "tiny", "source": {"path": "problems.jsonl"}},
              "teachers": [{"name": "mine", "engine": "pool", "source": {"path": "generations.jsonl"}}],
              "verify": {"math": {"patterns": [r"A:\s*(.+?)\s*$"]}},
              "export": {"name": "tiny", "formats": ["plain"]}}
    store = folder / "store"
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        first = bonforge.build(recipe, store=store, recipe_dir=folder)
    stricter = bonforge.build(recipe, store=store, recipe_dir=folder, overrides={"filter.max_pass_rate": 0.4},
                              show=False)
    first.shown = shown.getvalue()  # what the notebook's cell printed
    return store, first, stricter


def test_build_returns_the_typed_run_record(notebook):
    _, first, stricter = notebook
    assert isinstance(first, RunRecord) and first.status == "succeeded" and first.recipe_name == "tiny"
    assert first.dataset_version == 1 and stricter.dataset_version == 2
    assert stricter.stages["candidates"] == first.stages["candidates"]  # the override changed the filter only
    assert stricter.stages["problem_stats"] != first.stages["problem_stats"]


def test_a_build_shows_what_the_command_ends_with_and_its_repr_stays_one_line(notebook):
    store, first, stricter = notebook
    lines = first.shown.splitlines()
    rows = sum(bonforge.open(store).datasets()[1]["rows"].values())
    assert lines[:3] == ["problems: 4 in, 3 kept, 1 dropped (too_easy 1)", "candidates: 9",
                         "verdicts: 9, 5 correct (correct 5, wrong_answer 4)"]
    assert re.fullmatch(rf"run {first.run_id} in \d+\.\d s: dataset tiny v1 at {re.escape(first.dataset)} "
                        rf"\({rows} rows?\)", lines[3]), lines
    assert lines[4:] == [f"report: {first.report}"] and first.report.endswith("report.html")
    st = bonforge.open(store)
    assert st.run(first.run_id).summary() == first.shown.rstrip("\n")  # the same lines, read back later
    assert "1 kept" in st.run(stricter.run_id).summary()  # show=False printed nothing, the run still says it
    for shown in (repr(first), repr(st.run(first.run_id))):
        assert "\n" not in shown and len(shown) < 300, shown


def test_open_reads_runs_sql_stages_and_datasets(notebook):
    store, first, stricter = notebook
    st = bonforge.open(store)
    assert [r["run_id"] for r in st.runs()] == [first.run_id, stricter.run_id]
    run = st.run()  # the latest
    assert run.run_id == stricter.run_id and st.run(first.run_id[:-3]).run_id == first.run_id
    assert st.run(recipe="tiny").run_id == stricter.run_id
    verdicts = st.stage("verdicts")
    assert isinstance(verdicts, pa.Table) and verdicts.num_rows == 9
    frame = st.sql("SELECT problem_id, pass_rate FROM problem_stats WHERE teacher = '*' ORDER BY problem_id",
                   first.run_id).to_pandas()
    assert frame["pass_rate"].tolist() == pytest.approx([0.5, 1.0, 0.5, 1 / 3])
    kept = "SELECT count(*) AS n FROM problem_stats WHERE teacher = '*' AND keep"
    assert st.run(first.run_id).sql(kept).column("n").to_pylist() == [3]  # pass rate <= 0.5 (the default filter)
    assert run.sql(kept).column("n").to_pylist() == [1]  # <= 0.4
    sets = st.datasets()
    assert [(d["name"], d["version"], d["latest"]) for d in sets] == [("tiny", 2, True), ("tiny", 1, False)]
    assert sets[1]["path"] == first.dataset and sets[1]["recipe"] == "tiny" and sum(sets[1]["rows"].values()) > 0
    assert st.datasets("tiny") == sets


def test_bad_requests_raise_one_clear_error(notebook, tmp_path):
    store, first, _ = notebook
    st = bonforge.open(store)
    with pytest.raises(StoreError, match="has no stage 'fusion'"):
        st.stage("fusion")
    with pytest.raises(StoreError, match="no run of recipe 'gsm8k'"):
        st.run(recipe="gsm8k")
    with pytest.raises(ConfigError, match="filter.max_pas_rate: unknown field; did you mean 'max_pass_rate'"):
        bonforge.build({**first.recipe}, store=tmp_path, overrides=["filter.max_pas_rate=1"])


def test_importing_bonforge_stays_inert():
    code = "import sys, bonforge; print(sorted(m for m in sys.modules if m.startswith(('bonforge.', 'pyarrow', " \
           "'duckdb', 'ray', 'prefect'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
