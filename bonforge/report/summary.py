"""What a build kept and why: the summary ``bonforge run`` prints at the end of every build and the run record
keeps (``summary``). Problems in, kept, dropped by reason code (``schema.DropReason``), candidates, and the
verdicts by status with how many are correct (``correct``: the one column every domain shares; ``status``
is the domain's own word, docs/stages.md), what the rows cost (docs/cost.md); a build that judged stored
verdicts again because the judge changed also says how many, and how many of them flipped
(``bonforge.engine.rejudge``)."""

from __future__ import annotations

import json
from pathlib import Path

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


def ending_lines(store: StageStore, record) -> list[str]:
    """What a build ends with (``bonforge run`` prints it, ``bonforge.build`` shows it, a deployment logs it):
    the problems left out before sampling, the summary, each dataset published with its rows (and whether
    its content was an older version's), the time taken and where the report is. A run without a dataset of
    its own (failed, interrupted, derived from a build) says how it ended instead."""
    lines = []
    key = (record.stages.get("contamination") or [None])[0]
    if key and store.exists("contamination", key):
        dropped = store.manifest("contamination", key).extra.get("dropped", {})
        lines.append("left out before sampling: " + (", ".join(f"{n} ({why})" for why, n in dropped.items())
                                                     or "none"))
    lines += summary_lines(record.build_summary or {})
    took = f" in {record.wall_s:.1f} s" if record.wall_s is not None else ""
    published = [] if record.kind else [(w, p) for w, p in (
        ("dataset", record.dataset), ("rl dataset", record.rl_dataset), ("fusion dataset", record.fusion_dataset),
        ("preference dataset", record.preference_dataset), ("sft dataset", record.sft_dataset)) if p]
    if not published:
        lines.append(f"run {record.run_id}{took}: {record.status}" + (f" ({record.kind} of run {record.base_run})"
                                                                       if record.kind else ""))
    for what, path in published:
        name, version = str(path).rstrip("/").split("/")[-2:]
        at = store.loc.path("datasets", name, version, "manifest.json")
        manifest = json.loads(store.loc.read_bytes(at)) if store.loc.is_file(at) else None  # collected since
        said = f"{what} {name} {version} at {path}" if what == "dataset" else f"{what}: {path}"
        said += (" (no longer in the store)" if manifest is None else
                 f" ({_rows(manifest['files'])})" + _reused(manifest, name, version, record.started))
        lines.append(f"run {record.run_id}{took}: {said}" if what == "dataset" else said)
    if record.report:
        made_by = Path(record.report).parent.name
        lines.append(f"report: {record.report}" + (f" (run {made_by}'s, which built the same stages)"
                                                    if made_by != record.run_id else ""))
    return lines


def _rows(files: dict) -> str:
    """A dataset's rows (its largest format's, every split), and its validation split's."""
    per: dict[str, dict[str, int]] = {}
    for rel, f in files.items():
        fmt, split = rel.split("/", 1)
        per.setdefault(fmt, {})[split.removesuffix(".parquet")] = f["rows"]
    splits = max(per.values(), key=lambda s: sum(s.values()), default={})
    total = sum(splits.values())
    return f"{total} row{'s' * (total != 1)}" + (f", {splits['validation']} of them validation"
                                                 if "validation" in splits else "")


def _reused(manifest: dict, name: str, version: str, started: str) -> str:
    """A build that published no new version: identical content existed (a filter change can come back to an
    older version), and `latest` names that version now."""
    if manifest["created"] >= started[:19] + "Z":
        return ""
    return f" (reused: the same content as {version}, built {manifest['created']}; datasets/{name}/latest names it now)"
