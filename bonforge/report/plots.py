"""The plots of a run report. Each takes the run's DuckDB catalog and run record and returns a ``Plot``: its
query's rows (none: the figure says "no data"), all that the figure is drawn from besides this module's
code (``data``: the report reuses a PNG drawn from the same), and how to draw it (``figure()``, on demand:
drawing is most of a report's cost)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import duckdb
import numpy as np
from matplotlib.figure import Figure

from bonforge.report.timeline import timeline
from bonforge.storage.store import StageStore


@dataclass
class Plot:
    name: str  # file stem of the PNG
    title: str
    query: str
    rows: list
    draw: Callable  # draw(ax, rows): the figure's content, when it has rows
    height: float = 3.6  # inches
    data: list | None = None  # what the figure shows, JSON-serialisable (None: the rows)

    def __post_init__(self) -> None:
        if self.data is None:
            self.data = self.rows

    def figure(self) -> Figure:
        fig = Figure(figsize=(7.0, self.height), dpi=100, layout="constrained")
        ax = fig.add_subplot()
        if self.rows:
            self.draw(ax, self.rows)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        return fig


def _rows(con: duckdb.DuckDBPyConnection, query: str, stage: str) -> list[tuple]:
    """The query's rows, or none when the run has no ``stage`` view."""
    have = {r[0] for r in con.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    return con.sql(query).fetchall() if stage in have else []


_BINS = 20  # pass-rate histogram bins over [0, 1]


def pass_rate(con, run) -> Plot:
    q = (f"SELECT least(floor(pass_rate * {_BINS}), {_BINS - 1})::INT AS bin, count(*) AS problems "
         "FROM problem_stats WHERE teacher = '*' GROUP BY bin ORDER BY bin")
    rows = _rows(con, q, "problem_stats")

    def draw(ax, rows):
        ax.bar([(b + 0.5) / _BINS for b, _ in rows], [n for _, n in rows], width=1 / _BINS, color="#4c72b0",
               edgecolor="white")
        ax.set_xlim(0, 1)
        ax.set_xlabel("pass rate over all teachers")
        ax.set_ylabel("problems")

    return Plot("pass_rate", "Pass rate per problem", q, rows, draw)


def teacher_accuracy(con, run) -> Plot:
    """Over every problem, or with early stopping over the problems drawn in full: a problem stopped early holds
    only its first samples, all or mostly right, which would tilt the figure."""
    early = bool(((run.get("recipe") or {}).get("filter") or {}).get("early_stop"))
    where = (" WHERE problem_id NOT IN (SELECT problem_id FROM problem_stats WHERE teacher = '*' AND stopped_early)"
             if early else "")
    q = (f"SELECT teacher, avg(correct::INT) AS accuracy, count(*) AS n FROM verdicts{where} GROUP BY teacher "
         "ORDER BY teacher")
    rows = _rows(con, q, "verdicts")

    def draw(ax, rows):
        ax.barh([r[0] for r in rows], [100 * r[1] for r in rows], color="#55a868")
        for i, r in enumerate(rows):
            ax.text(100 * r[1], i, f" {100 * r[1]:.1f}% of {r[2]}", va="center")
        ax.set_xlim(0, 115)
        ax.set_xlabel("candidates verified correct (%)")
        ax.invert_yaxis()

    title = "Accuracy per teacher" + (" (problems stopped early left out)" if early else " (every problem)")
    return Plot("teacher_accuracy", title, q, rows, draw, 0.5 + 0.45 * max(len(rows), 2))


def verdict_classes(con, run) -> Plot:
    q = "SELECT teacher, status, count(*) AS n FROM verdicts GROUP BY teacher, status ORDER BY teacher, status"
    rows = _rows(con, q, "verdicts")
    teachers = sorted({r[0] for r in rows})

    def draw(ax, rows):
        left = np.zeros(len(teachers))
        for status in sorted({r[1] for r in rows}):
            counts = np.array([sum(r[2] for r in rows if r[0] == t and r[1] == status) for t in teachers])
            ax.barh(teachers, counts, left=left, label=status)
            left += counts
        ax.set_xlabel("candidates")
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, frameon=False)
        ax.invert_yaxis()

    return Plot("verdict_classes", "Verdict classes per verdicts stage (teacher)", q, rows, draw,
                0.8 + 0.45 * max(len(teachers), 2))


def pass_at_k(con, run) -> Plot:
    q = ("SELECT teacher, e.key AS k, avg(e.value) AS pass_at_k FROM "
         "(SELECT teacher, unnest(map_entries(pass_at_k)) AS e FROM problem_stats) GROUP BY ALL ORDER BY ALL")
    rows = _rows(con, q, "problem_stats")

    def draw(ax, rows):
        for teacher in sorted({r[0] for r in rows}):
            pts = [(r[1], r[2]) for r in rows if r[0] == teacher]
            ax.plot([k for k, _ in pts], [100 * v for _, v in pts], marker="o",
                    label="all teachers" if teacher == "*" else teacher, linewidth=2.5 if teacher == "*" else 1.2)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k")
        ax.set_ylabel("mean pass@k (%)")
        ax.legend(fontsize="small")

    return Plot("pass_at_k", "pass@k curves (mean over problems with at least k candidates)", q, rows, draw)


def prompts_per_problem(con, run) -> Plot:
    q = ("SELECT prompts, count(*) AS problems FROM (SELECT problem_id, count(*) AS prompts FROM genselect "
         "GROUP BY problem_id) GROUP BY prompts ORDER BY prompts")
    rows = _rows(con, q, "genselect")

    def draw(ax, rows):
        ax.bar([str(r[0]) for r in rows], [r[1] for r in rows], color="#8172b2")
        ax.set_xlabel("GenSelect prompts per kept problem")
        ax.set_ylabel("problems")

    return Plot("prompts_per_problem", "Prompts per problem", q, rows, draw)


def prompt_length(con, run) -> Plot:
    q = ("WITH r AS (SELECT min(n_tokens) AS lo, greatest(max(n_tokens) - min(n_tokens), 1) AS span FROM genselect) "
         "SELECT least(floor((n_tokens - lo) * 40.0 / span), 39)::INT AS bin, any_value(lo) AS lo, "
         "any_value(span) AS span, count(*) AS prompts, min(n_candidates) AS fewest, max(n_candidates) AS most "
         "FROM genselect, r GROUP BY bin ORDER BY bin")  # 40 bins from the shortest to the longest, in DuckDB
    rows = _rows(con, q, "genselect")

    def draw(ax, rows):
        width = rows[0][2] / 40
        ax.bar([lo + (b + 0.5) * width for b, lo, *_ in rows], [r[3] for r in rows], width=width, color="#c44e52",
               edgecolor="white")
        ax.set_xlabel("prompt length (tokens, see genselect.token_counter)")
        ax.set_ylabel("prompts")
        ax.set_title(f"{sum(r[3] for r in rows)} prompts, {min(r[4] for r in rows)}–{max(r[5] for r in rows)} "
                     "candidates each", fontsize="small")

    return Plot("prompt_length", "Prompt length", q, rows, draw)


def stage_timings(con, run, store: StageStore) -> Plot:
    q = "SELECT stage, key, wall_s, cached FROM run_stages ORDER BY stage, key"
    rows = con.sql(q).fetchall()
    labels = []
    for stage, key, _, _ in rows:
        teacher = store.manifest(stage, key).extra.get("teacher") if store.exists(stage, key) else None
        labels.append(f"{stage}[{teacher}]" if teacher else stage)
    walls = [r[2] or 0.0 for r in rows]
    this_run = run.timings or {}
    notes = ["cached" if r[3] else f"computed, {this_run.get(label, r[2] or 0):.1f}s in this run"
             for label, r in zip(labels, rows)]

    def draw(ax, rows):
        y = np.arange(len(rows))
        ax.barh(y, walls, color=["#bbbbbb" if r[3] else "#4c72b0" for r in rows])
        for i, note in enumerate(notes):
            ax.text(walls[i], i, f" {walls[i]:.1f}s ({note})", va="center", fontsize="small")
        ax.set_yticks(y, labels)
        ax.set_xlim(0, max(walls + [1e-3]) * 1.8)
        ax.set_xlabel("wall time when computed (s, from the manifest); grey: cache hit")
        ax.invert_yaxis()

    return Plot("stage_timings", f"Stage timings and cache hits ({sum(r[3] for r in rows)} of {len(rows)} cached)",
                q, rows, draw, 0.8 + 0.35 * max(len(rows), 2),
                [[label, r[3], wall, note] for label, r, wall, note in zip(labels, rows, walls, notes)])


def busy_timeline(con, run) -> Plot:
    """Where the time went (``bonforge.report.timeline``, its verification lane named by the problems'
    domains): a lane per resource, a bar per busy interval, each lane's busy share of the build in its label
    and in the title."""
    domains = {d for (d,) in _rows(con, "SELECT DISTINCT domain FROM problems", "problems")}
    data = timeline(run, domains)
    rows = [(lane["lane"], lane["busy_s"], lane["share"]) for lane in data["lanes"]]
    shares = ", ".join(f"{name} {share:.0%}" for name, _, share in rows)
    wall = data["wall_s"] or 0.0

    def draw(ax, rows):
        for i, lane in enumerate(data["lanes"]):
            ax.broken_barh([(a, max(b - a, wall / 500)) for a, b in lane["intervals"]], (i - 0.35, 0.7),
                           color="#4c72b0")
        ax.set_yticks(range(len(rows)), [f"{name}\n{secs:.1f} s, {share:.0%}" for name, secs, share in rows])
        ends = [t for lane in data["lanes"] for span in lane["intervals"] for t in span]
        ax.set_xlim(min(ends + [0.0]), max(ends + [wall, 1e-3]))  # a Ray node's clock may run ahead
        ax.set_xlabel(f"seconds from the build's start (wall {wall:.1f} s); bars: the resource busy")
        ax.invert_yaxis()

    return Plot("busy_timeline", f"Where the time went ({shares or 'no busy intervals recorded'})",
                "the run record's busy intervals per stage (timeline.json)", rows, draw,
                0.8 + 0.5 * max(len(rows), 2), data)


def tokens_per_teacher(con, run, store: StageStore) -> Plot:
    """Token totals from the token columns; where the engine gave none, the text characters that each
    candidates stage's manifest records (``text_chars``): no candidate text is read."""
    q = ("SELECT teacher, sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens "
         "FROM candidates GROUP BY teacher ORDER BY teacher")
    chars: dict[str, int] = {}
    for key in run.stages.get("candidates", []):
        man = store.manifest("candidates", key) if store.exists("candidates", key) else {}
        if "teacher" in man and man.get("text_chars") is not None:
            chars[man["teacher"]] = chars.get(man["teacher"], 0) + man["text_chars"]
    rows = [(t, p, c, chars.get(t)) for t, p, c in _rows(con, q, "candidates")]

    def draw(ax, rows):
        labels = [t if c is not None else f"{t} (chars)" for t, _, c, _ in rows]
        out = [c if c is not None else chars or 0 for _, _, c, chars in rows]
        inp = [p or 0 for _, p, _, _ in rows]
        ax.barh(labels, out, color="#dd8452", label="completion")
        ax.barh(labels, inp, left=out, color="#937860", label="prompt")
        ax.set_xlabel("tokens; (chars): text length where the engine gave no token counts")
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False, fontsize="small")
        ax.invert_yaxis()

    return Plot("tokens_per_teacher", "Tokens per teacher", q + "; text_chars: the candidates' manifests", rows, draw,
                0.5 + 0.45 * max(len(rows), 2))


def selector_eval(con, run) -> Plot:
    q = ("SELECT run, avg(correct::INT) AS accuracy, avg(fallback_correct::INT) AS with_fallback, "
         "count(*) FILTER (WHERE NOT parsed AND NOT skipped) AS unparsed FROM selector_eval GROUP BY run ORDER BY run")
    rows = _rows(con, q, "selector_eval")
    summary = run.get("summary", {})
    lines = {name: summary[name] for name in ("pass@1", "majority@N") if name in summary}

    def draw(ax, rows):
        x = np.arange(len(rows))
        ax.bar(x - 0.2, [100 * r[1] for r in rows], 0.4, label="selector")
        ax.bar(x + 0.2, [100 * r[2] for r in rows], 0.4, label="with random fallback")
        for name, style in (("pass@1", ":"), ("majority@N", "--")):
            if name in lines:
                ax.axhline(100 * lines[name], color="#444444", linestyle=style, label=name)
        ax.set_xticks(x, [f"run {r[0]} ({r[3]} unparsed)" for r in rows])
        ax.set_ylabel("selection accuracy (%)")
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, frameon=False, fontsize="small")

    return Plot("selector_eval", "Selector accuracy per run, beside pass@1 and majority@N", q, rows, draw,
                data=[rows, lines])
