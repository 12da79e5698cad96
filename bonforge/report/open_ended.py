"""The report's open-ended tables (problems without a gold answer), per language and per category: the
pairwise win rates (each contender against each baseline, both orders, with the bootstrap interval of the
``pairwise`` stage's own settings and the share of prompts whose two orders disagree), the Best-of-N picks'
scores, and the fused answers beside Best-of-N on the same pools (the selection scorer marked).

A problem's language is its ``language`` field, else the one a language_id scorer expected (the request's);
its category the ``category`` field of its metadata (``-`` when none)."""

from __future__ import annotations

import html
from types import SimpleNamespace

from bonforge.scoring import pairwise as games
from bonforge.storage.store import StageStore

_GROUPS = (
    "WITH expected AS (SELECT problem_id, min(json_extract_string(detail, '$.expected')) AS language "
    "FROM scores WHERE kind = 'language_id' GROUP BY problem_id) "
    "SELECT p.problem_id, coalesce(json_extract_string(p.metadata, '$.language'), e.language, '-') AS language, "
    "coalesce(json_extract_string(p.metadata, '$.category'), '-') AS category "
    "FROM problems p LEFT JOIN expected e USING (problem_id)")


def _table(ident: str, title: str, head: list[str], rows: list[list], note: str = "") -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r) + "</tr>" for r in rows)
    return (f'<section id="{ident}" data-rows="{len(rows)}"><h2>{html.escape(title)}</h2>'
            f"{f'<p>{html.escape(note)}</p>' if note else ''}<table><tr>{th}</tr>{body}</table></section>")


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def _groups(con) -> dict[str, tuple[str, str]]:
    return {pid: (lang, cat) for pid, lang, cat in con.sql(_GROUPS).fetchall()}


def _by(groups: dict, pid: str) -> list[tuple[str, str]]:
    lang, cat = groups.get(pid, ("-", "-"))
    return [("all", "all"), ("language", lang), ("category", cat)]


def win_rates(con, store: StageStore, run) -> str:
    """Per contender vs baseline, overall, per language and per category."""
    (key,) = run["stages"]["pairwise"][:1]
    manifest = store.manifest("pairwise", key)
    rounds, seed, level = manifest.config["bootstrap"]
    warnings = sorted({e["warning"] for e in manifest.extra.get("evaluation", {}).values() if e.get("warning")})
    cfg = SimpleNamespace(bootstrap_rounds=rounds, seed=seed, level=level)
    groups = _groups(con)
    cells: dict[tuple, list[dict]] = {}
    for r in con.sql("SELECT problem_id, contender, baseline, game, label, contender_score FROM pairwise "
                     "ORDER BY problem_id, contender, baseline, game").to_arrow_table().to_pylist():
        for by, value in _by(groups, r["problem_id"]):
            cells.setdefault((r["contender"], r["baseline"], by, value), []).append(r)
    rows = []
    for (con_, base, by, value), mine in sorted(cells.items()):
        s = games.summary(mine, cfg)
        rows.append([con_, base, by, value, s["n"], s["win"], s["tie"], s["loss"], s["inconsistent"], s["split"],
                     s["invalid"], s["win_rate"], s["ci_low"], s["ci_high"], s["inconsistent_rate"]])
    head = ["contender", "baseline", "by", "group", "n", "win", "tie", "loss", "inconsistent", "split", "invalid",
            "win rate", "ci low", "ci high", "inconsistent rate"]
    return _table("win_rates", "Pairwise win rates (both orders)", head, rows,
                  f"win rate = (W + T/2)/n over prompts whose both games have a label; {level:.0%} interval from "
                  f"{rounds} bootstrap resamples of the prompts (seed {seed}); inconsistent: the two orders disagree."
                  + "".join(f" Warning: {w}." for w in warnings))


def bon_scores(con) -> str:
    """The Best-of-N picks over all teachers: per language and category, problems, picks, mean value."""
    groups = _groups(con)
    cells: dict[tuple, list[dict]] = {}
    for r in con.sql("SELECT problem_id, scorer, n_candidates, n_eligible, value FROM bon WHERE pool = '*' "
                     "ORDER BY problem_id").to_arrow_table().to_pylist():
        for by, value in _by(groups, r["problem_id"]):
            cells.setdefault((r["scorer"], by, value), []).append(r)
    rows = []
    for (scorer, by, value), mine in sorted(cells.items()):
        picked = [r["value"] for r in mine if r["value"] is not None]
        rows.append([scorer, by, value, len(mine), len(picked), sum(r["n_eligible"] for r in mine) / len(mine),
                     sum(picked) / len(picked) if picked else None])
    return _table("bon_scores", "Best-of-N picks", ["scorer", "by", "group", "problems", "picked",
                                                     "eligible per problem", "mean value"], rows)


def fusion_scores(store: StageStore, run) -> str:
    (key,) = run["stages"]["fusion_open"][:1]
    cmp = store.manifest("fusion_open", key).extra.get("comparison", {})
    rows = [[s + (" (selection scorer)" if d["selection"] else ""), d["n"], d["fused_mean"], d["bon_mean"],
             d["pool_mean"], d["fused_at_least_bon"]] for s, d in sorted(cmp.get("scorers", {}).items())]
    return _table("fusion_scores", "Fused answers beside Best-of-N on the same pools",
                  ["scorer", "n", "fused mean", "Best-of-N mean", "pool mean", "fused >= Best-of-N"], rows,
                  "Best-of-N maximises its selection scorer on the pool by construction: that row is no fair "
                  "comparison (the pairwise judge is).")


def sections(con, store: StageStore, run) -> list[str]:
    """The open-ended sections of a run that has them."""
    out = []
    if "bon" in run["stages"]:
        out.append(bon_scores(con))
    if "fusion_open" in run["stages"]:
        out.append(fusion_scores(store, run))
    if "pairwise" in run["stages"]:
        out.append(win_rates(con, store, run))
    return out
