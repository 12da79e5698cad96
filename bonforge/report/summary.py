"""What a build kept and why: the summary ``bonforge run`` prints at the end of every build and the run record
keeps (``summary``). Problems in, kept, dropped by reason code (``schema.DropReason``), candidates, and the
verdicts by status with how many are correct (``correct``: the one column every domain shares; ``status``
is the domain's own word, docs/stages.md), what the rows cost (docs/cost.md); a build that judged stored
verdicts again because the judge changed also says how many, and how many of them flipped
(``bonforge.engine.rejudge``)."""

from __future__ import annotations

from bonforge.report.cost import build_cost, cost_lines
from bonforge.schema import NO_LABEL
from bonforge.storage.catalog import add_view
from bonforge.storage.store import StageStore

STAGES = ("problems", "candidates", "verdicts", "problem_stats")


def build_summary(store: StageStore, stages: dict[str, list[str]], cached: dict[str, list[str]] | None = None,
                  kept_rows: int | None = None) -> dict:
    """The summary of the committed outputs of ``stages`` (stage -> keys, a run's map); a stage the build
    does not have is left out of it. ``cost`` (``bonforge.report.cost``, with ``cached`` and the dataset's
    ``kept_rows``) where a stage records one."""
    con = store.duckdb()
    try:
        have = set()
        for name in STAGES:
            outputs = [(name, k) for k in stages.get(name, []) if store.exists(name, k)]
            if any(store.paths(s, k) for s, k in outputs):
                add_view(con, store, name, outputs)
                have.add(name)
        count = lambda q: con.sql(q).fetchall()[0][0]  # noqa: E731
        out: dict = {}
        if "problems" in have:
            out["problems"] = count("SELECT count(*) FROM problems")
        if "problem_stats" in have:
            rows = con.sql("SELECT drop_reason, count(*) AS n FROM problem_stats WHERE teacher = '*' "
                           "GROUP BY drop_reason ORDER BY n DESC, drop_reason").fetchall()
            out["kept"] = sum(n for why, n in rows if why is None)
            out["dropped"] = {why: n for why, n in rows if why is not None}
        if "candidates" in have:
            out["candidates"] = count("SELECT count(*) FROM candidates")
        if "verdicts" in have:
            rows = con.sql("SELECT status, count(*) AS n, count(*) FILTER (WHERE correct) AS ok FROM verdicts "
                           "GROUP BY status ORDER BY n DESC, status").fetchall()
            out["verdicts"] = {status: n for status, n, _ in rows}
            out["correct"] = sum(ok for _, _, ok in rows)
        if cost := build_cost(store, stages, cached, kept_rows):
            out["cost"] = cost
        return out
    finally:
        con.close()


def summary_lines(summary: dict) -> list[str]:
    """The summary in words, a line per kind of row."""
    lines = []
    if "problems" in summary:
        line = f"problems: {summary['problems']} in"
        if "kept" in summary:
            dropped = summary["dropped"]
            reasons = ", ".join(f"{why} {n}" for why, n in dropped.items())
            line += f", {summary['kept']} kept, {sum(dropped.values())} dropped" + (f" ({reasons})" if reasons else "")
        lines.append(line)
    if "candidates" in summary:
        lines.append(f"candidates: {summary['candidates']}")
    if "verdicts" in summary:
        by = ", ".join(f"{status} {n}" for status, n in summary["verdicts"].items())
        lines.append(f"verdicts: {sum(summary['verdicts'].values())}, {summary['correct']} correct ({by})")
        unknown = {s: n for s, n in summary["verdicts"].items() if s in NO_LABEL}
        if unknown:
            lines.append(f"verdicts without a label: {sum(unknown.values())} ("
                         + ", ".join(f"{s} {n}" for s, n in unknown.items()) + "): in no pass rate, reward or "
                         "export; the next build judges them again")  # fmt: skip
    if summary.get("cost", {}).get("rows_usd") is not None:  # some price was stated
        lines += cost_lines(summary["cost"])
    if summary.get("rejudged"):
        lines.append(f"re-judged: {summary['rejudged']} verdicts stored under an earlier judge (its fingerprint "
                     f"moved), {summary['flipped']} flipped (`bonforge diff` lists them)")
    return lines
