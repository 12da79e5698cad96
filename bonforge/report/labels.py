"""Where our verdicts disagree with the labels an imported pool published (a pool teacher's ``label`` key,
kept in ``candidates.reference_correct``): per teacher, the candidates labelled, how many we judge otherwise,
and the problems where that happens, both ways. A section of the run report; the viewer lists the candidates
(``bonforge.viewer.views.label_disagreements``)."""

from __future__ import annotations

import html

from bonforge.schema import NO_LABEL

# Whether a candidate's published label and our verdict disagree, over a row with both (candidates joined with
# verdicts by candidate_id): a verdict that is no label (the sandbox failed, the machine was too busy) says
# nothing, so it never disagrees. The report's counts and the viewer's filter both read it.
DISAGREES = ("coalesce(reference_correct IS NOT NULL AND correct <> reference_correct AND status NOT IN ("
             + ", ".join(f"'{s}'" for s in NO_LABEL) + "), false)")
WAYS = {"we_say_correct": f"{DISAGREES} AND correct", "label_says_correct": f"{DISAGREES} AND NOT correct"}

QUERY = f"""SELECT c.teacher,
       count(*) AS labelled,
       count(*) FILTER (WHERE {DISAGREES}) AS disagree,
       coalesce(list_sort(list_distinct(list(c.problem_id) FILTER (WHERE {WAYS['we_say_correct']}))),
                [])::VARCHAR[] AS we_say_correct,
       coalesce(list_sort(list_distinct(list(c.problem_id) FILTER (WHERE {WAYS['label_says_correct']}))),
                [])::VARCHAR[] AS label_says_correct
FROM candidates c JOIN verdicts v USING (candidate_id)
WHERE c.reference_correct IS NOT NULL
GROUP BY c.teacher ORDER BY c.teacher"""

SHOWN = 100  # problem ids listed per cell; the rest are counted (the query gives them all)


def disagreements(con) -> list[dict]:
    """One row per teacher with published labels (none when the run has no labelled candidate)."""
    views = {r[0] for r in con.sql("SELECT table_name FROM information_schema.tables").fetchall()}
    if not {"candidates", "verdicts"} <= views:
        return []
    cols = {r[0] for r in con.sql("DESCRIBE candidates").fetchall()}
    if "reference_correct" not in cols:
        return []
    rel = con.sql(QUERY)
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]


def _ids(ids: list[str]) -> str:
    shown = ", ".join(html.escape(i) for i in ids[:SHOWN])
    return shown + (f" … and {len(ids) - SHOWN} more" if len(ids) > SHOWN else "") if ids else "none"


def section(con) -> str:
    """The report's section, or nothing when no candidate carries a published label."""
    rows = disagreements(con)
    if not rows:
        return ""
    head = "".join(f"<th>{h}</th>" for h in ("teacher", "labelled", "disagree", "problems: we say correct, "
                                             "the label wrong", "problems: the label says correct, we do not"))
    body = "".join(f"<tr><td>{html.escape(r['teacher'])}</td><td>{r['labelled']}</td><td>{r['disagree']}</td>"
                   f"<td>{_ids(r['we_say_correct'])}</td><td>{_ids(r['label_says_correct'])}</td></tr>" for r in rows)
    return (f'<section id="labels"><h2>Our verdicts against the pool\'s published labels</h2>'
            f'<table><tr>{head}</tr>{body}</table><details><summary>query</summary><code>{html.escape(QUERY)}'
            "</code></details></section>")
