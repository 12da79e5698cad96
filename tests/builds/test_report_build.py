"""The run report: written at the end of a real GSM8K build, every plot has data, it is self-contained,
and headless Chromium (Debian's package) opens it, decodes every image and takes a non-trivial screenshot.
A figure drawn from the same data as one before is taken from the store's figure cache, not drawn again."""

from __future__ import annotations

import dataclasses
import logging
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from golden_keys import assert_golden
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.config import load_recipe
from bonforge.flows.build import build
from bonforge.storage.run_record import RunRecord
from bonforge.report import plots, report_after_build, write_report
from bonforge.storage.catalog import connect
from bonforge.storage.store import StageStore

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "gsm8k-genselect.yaml"
PLOTS = {"pass_rate", "teacher_accuracy", "verdict_classes", "pass_at_k", "prompts_per_problem", "prompt_length",
         "stage_timings", "busy_timeline", "tokens_per_teacher"}
pytestmark = pytest.mark.slow  # Prefect + Ray start-up


@pytest.fixture(scope="module")
def built(tmp_path_factory, gsm8k_pool, shared_prefect):
    import ray

    root = tmp_path_factory.mktemp("store")
    record = build(load_recipe(RECIPE, ["problems.limit=300"]), str(root), str(RECIPE.parent))
    yield StageStore(root), record
    ray.shutdown()


def sections(page: str) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in re.finditer(r'<section id="(\w+)" data-rows="(\d+)">', page)}


def chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium)")
    profile = tmp / f"profile-{len(list(tmp.iterdir()))}"
    return subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                           "--virtual-time-budget=5000", *args], capture_output=True, text=True, timeout=120)


def test_build_writes_the_report_and_every_plot_has_data(built):
    store, record = built
    path = Path(record["report"])
    assert path == store.root / "reports" / record["run_id"] / "report.html"
    page = path.read_text()
    rows = sections(page)
    assert set(rows) == PLOTS and all(rows.values()), rows
    assert {p.stem for p in path.parent.glob("*.png")} == PLOTS
    # self-contained: every image inline, nothing fetched
    srcs = re.findall(r'src="([^"]*)"', page)
    assert len(srcs) == len(PLOTS) and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert not re.search(r'(href|src)="(https?:|//)', page)


def test_the_report_compares_our_verdicts_with_the_pools_labels(built):
    """GSM8K's pool publishes `is_correct` for every sample: the report lists each of the four teachers, the
    candidates labelled and where we disagree (nowhere: our verdicts reproduce the labels)."""
    store, record = built
    page = Path(record["report"]).read_text()
    part = page.split('<section id="labels">')[1].split("</section>")[0]
    cells = [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", part)[1:]]
    assert sorted(c[0] for c in cells) == sorted(t.name for t in load_recipe(RECIPE).teachers) and len(cells) == 4
    assert all(int(c[1]) > 0 and c[2:] == ["0", "none", "none"] for c in cells), cells


def test_the_report_reads_no_candidate_text(built, tmp_path):
    """Every figure comes from aggregates that leave the text column unread: the report of a copy of the store
    whose candidates files have no ``text`` column at all is the same report, characters per teacher included
    (from the candidates' manifests)."""
    store, record = built
    copy = StageStore(shutil.copytree(store.root, tmp_path / "store"))
    con = connect(store, record["run_id"])
    want = dict(con.sql("SELECT teacher, sum(length(text)) FROM candidates GROUP BY teacher").fetchall())
    for key in record["stages"]["candidates"]:
        for path in copy.paths("candidates", key):
            pq.write_table(pq.read_table(path).drop_columns(["text"]), path)
    page = write_report(copy, record["run_id"], tmp_path / "r").read_text()
    assert sections(page) == sections(Path(record["report"]).read_text())
    rows = plots.tokens_per_teacher(connect(copy, record["run_id"]), copy.run(record["run_id"]), copy).rows
    assert {t: chars for t, _, _, chars in rows} == want and all(want.values())


def test_headless_chromium_opens_the_report_and_screenshots_it(built, tmp_path):
    _, record = built
    url = Path(record["report"]).as_uri()
    dom = chromium("--dump-dom", url, tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert f"<title>report ok: {len(PLOTS)}/{len(PLOTS)} images</title>" in dom.stdout  # every image decoded
    assert not re.search(r"CONSOLE.*(Uncaught|Error)", dom.stderr), dom.stderr[-2000:]
    shot = tmp_path / "report.png"
    res = chromium(f"--screenshot={shot}", "--window-size=1100,4200", url, tmp=tmp_path)
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    from matplotlib.image import imread

    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (4200, 1100)
    colours = np.unique((pixels.reshape(-1, 3) * 255).astype(np.uint8), axis=0)
    assert len(colours) > 200  # plots, not a blank or error page
    assert (pixels < 0.9).any(axis=-1).mean() > 0.05  # a real share of the page is drawn on


def test_cli_report_of_a_chosen_run_into_a_folder(built, tmp_path):
    store, record = built
    res = CliRunner().invoke(app, ["report", record["run_id"][:15], "--output", str(tmp_path / "r"),
                                   "--store", str(store.root)])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == str(tmp_path / "r" / "report.html")
    res = CliRunner().invoke(app, ["report", "nope", "--store", str(store.root)])
    assert res.exit_code == 2 and "no run 'nope'" in res.output


def test_a_failing_report_never_fails_the_build(built, monkeypatch, caplog):
    store, record = built

    def broken(con, run):
        raise RuntimeError("plot exploded")

    monkeypatch.setattr(plots, "pass_rate", broken)
    rec = RunRecord(record["run_id"], None, None, {}, {})
    with caplog.at_level(logging.WARNING, logger="bonforge"):
        report_after_build(str(store.root), rec)
    assert rec.report is None and "report" not in rec
    assert f"run {record['run_id']}: the report could not be written: RuntimeError: plot exploded" in caplog.text


def test_a_figure_is_drawn_only_from_data_not_drawn_before(built, tmp_path, monkeypatch):
    store, record = built
    drawn = []
    figure = plots.Plot.figure
    monkeypatch.setattr(plots.Plot, "figure", lambda self: drawn.append(self.name) or figure(self))
    cache = store.root / "reports" / "figures"
    shutil.rmtree(cache)
    fresh = write_report(store, record["run_id"], tmp_path / "fresh")
    assert sorted(drawn) == sorted(PLOTS) and len(list(cache.glob("*.png"))) == len(PLOTS)
    drawn.clear()
    again = write_report(store, record["run_id"], tmp_path / "again")
    assert drawn == [] and again.read_bytes() == fresh.read_bytes() == Path(record["report"]).read_bytes()
    # one plot over other data: only it is drawn, and its PNG is the new one
    pass_rate = plots.pass_rate
    monkeypatch.setattr(plots, "pass_rate", lambda con, run: dataclasses.replace(
        p := pass_rate(con, run), rows=p.rows[: len(p.rows) // 2], data=None))
    other = write_report(store, record["run_id"], tmp_path / "other")
    assert drawn == ["pass_rate"] and len(list(cache.glob("*.png"))) == len(PLOTS) + 1
    assert (other.parent / "pass_rate.png").read_bytes() != (fresh.parent / "pass_rate.png").read_bytes()
    assert (other.parent / "pass_at_k.png").read_bytes() == (fresh.parent / "pass_at_k.png").read_bytes()
    # a store that cannot be written to: `report -o DIR` still writes the report, its new figure drawn
    shutil.rmtree(cache)

    def read_only(path, data):
        raise PermissionError(f"read-only store: {path}")

    monkeypatch.setattr(store.loc, "write_bytes", read_only)
    drawn.clear()
    elsewhere = write_report(store, record["run_id"], tmp_path / "elsewhere")
    assert elsewhere.read_bytes() == other.read_bytes() and len(drawn) == len(PLOTS) and not cache.exists()


def test_maxk_weights_stage_agrees_with_problem_stats(built, tmp_path):
    store, record = built
    out = tmp_path / "weights.parquet"
    res = CliRunner().invoke(app, ["maxk", record["run_id"], "--pool", "--k", "2", "--k", "4", "-o", str(out),
                                   "--store", str(store.root)])
    assert res.exit_code == 0, res.output
    run = store.run()
    assert run["kind"] == "maxk" and run["base_run"] == record["run_id"] and "maxk_weights" in run["stages"]
    assert_golden("gsm8k-300-maxk", run)
    assert f"maxk_weights {run['stages']['maxk_weights'][0]}" in res.output
    con = connect(store)
    bad = con.sql("""
        SELECT m.problem_id, m.k, sum(m.weight) AS total, sum(m.weight * m.reward) AS expected_max,
               any_value(s.max_at_k[m.k]) AS max_at_k
        FROM maxk_weights m JOIN problem_stats s ON s.problem_id = m.problem_id AND s.teacher = '*'
        GROUP BY m.problem_id, m.k
        HAVING abs(total - 1) > 1e-9 OR abs(expected_max - max_at_k) > 1e-9""").fetchall()
    assert bad == []
    table = pq.read_table(out)
    assert table.num_rows == con.sql("SELECT count(*) FROM maxk_weights").fetchall()[0][0] > 0
    assert set(table.column("k").to_pylist()) == {2, 4} and set(table.column("group").to_pylist()) == {"*"}
