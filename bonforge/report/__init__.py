"""The run report: one self-contained HTML file (plots embedded as base64 PNG) plus a PNG per plot, in
``<store>/reports/<run_id>/``. Every number comes from the run's DuckDB catalog and its record.

Drawing is most of a report's cost (~0.1-0.2 s of CPU per figure), and most figures of a rebuild show what
an earlier run showed (a filter change redraws three of eight). So each PNG is also kept in the store under
``reports/figures/<key>.png``, its key a hash of what it is drawn from (``Plot.data``), the plot's name, the
code of ``plots.py`` and matplotlib's version; a report takes the PNG of a key it finds there as it is."""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from bonforge.report import open_ended
from bonforge.storage.catalog import connect
from bonforge.storage.fs import LocalDir

if TYPE_CHECKING:
    from bonforge.storage.run_record import RunRecord
from bonforge.storage.store import StageStore

log = logging.getLogger("bonforge")

_CSS = """body{font:14px/1.45 system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse}td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:left}
section{margin:2em 0}img{max-width:100%}details{color:#555;font-size:12px}code{white-space:pre-wrap}"""
# Marks the page once every embedded image has decoded (a headless browser can read it from the title).
_CHECK = """window.addEventListener('load', () => {
  const imgs = [...document.images], ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  document.title = `report ok: ${ok}/${imgs.length} images`; });"""


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _drawing_code() -> str:
    """What else decides a PNG's pixels: the plots' code and matplotlib's version."""
    import matplotlib

    from bonforge.report import plots

    return hashlib.sha256(Path(plots.__file__).read_bytes() + matplotlib.__version__.encode()).hexdigest()


def _figure(store: StageStore, plot, code: str) -> bytes:
    """The PNG of ``plot``: from the store's figure cache when one was drawn from the same, else drawn now
    (and cached, where the store can be written: ``bonforge report -o DIR`` also works on a read-only one)."""
    data = json.dumps([plot.name, plot.data, code], default=str, sort_keys=True).encode()
    cached = store.loc.path("reports", "figures", f"{hashlib.sha256(data).hexdigest()}.png")
    if store.loc.is_file(cached):
        return store.loc.read_bytes(cached)
    png = _png(plot.figure())
    try:
        store.loc.write_bytes(cached, png)
    except OSError as e:
        log.debug("figure cache %s not written: %s", cached, e)
    return png


def stages_table(con) -> str:
    """The run's stages, a per-teacher stage's teacher named: rows in each output, rows computed by this run
    and rows reused (taken from earlier outputs by row reuse; a cached output counts neither), wall time and
    whether the output was cached."""
    stages = con.sql("SELECT stage, coalesce(teacher, ''), key, rows, rows_computed, rows_reused, wall_s, cached "
                     "FROM run_stages ORDER BY stage, teacher, key").fetchall()
    head = "".join(f"<th>{h}</th>" for h in ("stage", "teacher", "key", "rows", "computed", "reused", "wall s",
                                             "cached"))
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r) + "</tr>" for r in stages)
    return f'<h2>Stages</h2><table id="stages"><tr>{head}</tr>{body}</table>'


def strength_section(con) -> str:
    """Test-suite strength (code problems with known-wrong candidates): how many problems were measured, the
    mean share of known-wrong candidates their tests reject, and the weakest suites; '' when none was."""
    if "problem_stats" not in {r[0] for r in con.sql("SELECT table_name FROM information_schema.tables").fetchall()}:
        return ""
    if "suite_strength" not in con.sql("SELECT * FROM problem_stats LIMIT 0").columns:  # a store from before it
        return ""
    query = ("SELECT problem_id, n_known_wrong, suite_strength FROM problem_stats WHERE teacher = '*' "
             "AND suite_strength IS NOT NULL ORDER BY suite_strength, problem_id")
    rows = con.sql(query).fetchall()
    if not rows:
        return ""
    mean = sum(r[2] for r in rows) / len(rows)
    cells = "".join(f"<tr><td>{html.escape(pid)}</td><td>{n}</td><td>{s:.2f}</td></tr>" for pid, n, s in rows[:10])
    measured = f"{len(rows)} problem" + "s" * (len(rows) != 1)
    return (f'<section id="suite_strength"><h2>Test-suite strength</h2><p>{measured} with known-wrong '
            f"candidates; their tests reject {mean:.1%} of them on average (weakest first):</p><table><tr>"
            f"<th>problem</th><th>known wrong</th><th>rejected</th></tr>{cells}</table><details><summary>query"
            f"</summary><code>{html.escape(query)}</code></details></section>")


def write_report(store: StageStore, run_id: str | None = None, out_dir: Path | None = None):
    """Write the report of a run (default: the latest) into ``out_dir``, else the store (a local folder or
    S3); returns the HTML file's path."""
    from bonforge.report import labels, plots  # matplotlib loads only here

    run = store.run(run_id)
    con = connect(store, run.run_id)
    loc, folder = (LocalDir(Path(out_dir)), ()) if out_dir else (store.loc, ("reports", run.run_id))
    spent = plots.busy_timeline(con, run)  # where the time went: its data beside the report, for its readers
    loc.write_bytes(loc.path(*folder, "timeline.json"), json.dumps(spent.data, indent=1).encode())
    figures = [plots.pass_rate(con, run), plots.teacher_accuracy(con, run), plots.verdict_classes(con, run),
               plots.pass_at_k(con, run), plots.prompts_per_problem(con, run), plots.prompt_length(con, run),
               plots.stage_timings(con, run, store), spent, plots.tokens_per_teacher(con, run, store)]
    if "selector_eval" in run.stages:
        figures.append(plots.selector_eval(con, run))
    sections, code = [], _drawing_code()
    for p in figures:
        png, n = _figure(store, p, code), len(p.rows)
        loc.write_bytes(loc.path(*folder, f"{p.name}.png"), png)
        sections.append(
            f'<section id="{p.name}" data-rows="{n}"><h2>{html.escape(p.title)}</h2>'
            f'<img alt="{html.escape(p.title)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
            f"<details><summary>query ({n} rows)</summary><code>{html.escape(p.query)}</code></details></section>")
    if "contamination" in run.stages:
        dropped = con.sql("SELECT coalesce(benchmark, reason) AS why, count(*) AS n FROM contamination "
                          "GROUP BY why ORDER BY why").fetchall()  # fmt: skip
        cells = "".join(f"<tr><td>{html.escape(why)}</td><td>{n}</td></tr>" for why, n in dropped)
        sections.insert(0, f'<section id="contamination"><h2>Problems left out before sampling</h2><table>'
                           f"<tr><th>dropped by</th><th>problems</th></tr>{cells or '<tr><td>none</td><td>0</td></tr>'}"
                           "</table><details><summary>query</summary><code>SELECT * FROM contamination</code>"
                           "</details></section>")  # fmt: skip
    labelled = labels.section(con)
    if labelled:
        sections.insert(0, labelled)
    sections += open_ended.sections(con, store, run)
    sections.append(strength_section(con))
    facts = {k: run.get(k) for k in ("run_id", "recipe_name", "status", "kind", "started", "wall_s", "dataset")
             if run.get(k) is not None}
    for key in run.stages.get("genselect", [])[:1]:  # what assembly left out for length
        extra = store.manifest("genselect", key).extra if store.exists("genselect", key) else {}
        facts.update({k: extra[k] for k in ("candidates_dropped_too_long", "prompts_dropped_too_long") if k in extra})
    head = "".join(f"<tr><th>{k}</th><td>{html.escape(str(v))}</td></tr>" for k, v in facts.items())
    page = (f'<!doctype html><html><head><meta charset="utf-8"><title>bonforge run {html.escape(run.run_id)}'
            f"</title><style>{_CSS}</style><script>{_CHECK}</script></head><body>"
            f"<h1>bonforge run {html.escape(run.run_id)}</h1><table>{head}</table>"
            f"{stages_table(con)}{''.join(sections)}</body></html>")
    path = loc.path(*folder, "report.html")
    loc.write_bytes(path, page.encode())
    return path


def report_after_build(store_root: str, record: RunRecord, reuse: bool = False) -> None:
    """Write the report of a finished build and note its path in ``record`` (`bonforge run` prints it); a
    failure only logs a warning. With ``reuse`` (a build that computed nothing), the report of an earlier
    run with exactly the same stages is taken as it is."""
    store = StageStore(store_root)
    record.report = _earlier_report(store, record) if reuse else None
    if record.report is None:
        try:
            record.report = str(write_report(store, record.run_id))
        except Exception as e:  # the report must never fail the build it describes
            log.warning("run %s: the report could not be written: %s: %s", record.run_id, type(e).__name__, e)
            return
    store.record_run(record)  # the stored record names it too (`bonforge runs`, the Python API's runs())


def _earlier_report(store: StageStore, record: RunRecord) -> str | None:
    """The report of an earlier run with exactly the same stages, where one was written."""
    for run in reversed(store.runs()):
        path = store.loc.path("reports", run.run_id, "report.html")
        if run.run_id != record.run_id and run.stages == record.stages and store.loc.is_file(path):
            return str(path)
    return None
