"""The viewer's open-ended page (problems without a gold answer): a problem's candidates with their scores
(one entry per scorer), the Best-of-N picks (all teachers and per teacher), the fused answer beside Best-of-N
on its pool, and the pairwise games, both orders of each pair side by side with the prompt's outcome."""

from __future__ import annotations

from bonforge.scoring import pairwise as games
from bonforge.viewer.catalog import SNIPPET, NotFound, need


def _rows(cur, sql: str, params: list) -> list[dict]:
    cur.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def open_problem(cat, run: dict, problem_id: str) -> dict:
    need(cat, run, "problems", "candidates", "scores")
    have, cur = cat.views(run), cat.cursor(run)
    problems = _rows(cur, "SELECT problem_id, question, answer, metadata FROM problems WHERE problem_id = ?",
                     [problem_id])
    if not problems:
        raise NotFound(f"run {run['run_id']} has no problem {problem_id!r}")
    cands = _rows(cur, "SELECT candidate_id, teacher, sample_index, text FROM candidates WHERE problem_id = ? "
                       "ORDER BY teacher, sample_index, candidate_id", [problem_id])
    bon = scored(cur, have, problem_id, cands)
    fusion = None
    if "fusion_open" in have:
        found = _rows(cur, "SELECT * FROM fusion_open WHERE problem_id = ?", [problem_id])
        fusion = found[0] if found else None
        if fusion:
            for k in ("fused_values", "bon_values", "pool_max", "pool_mean", "teacher_chars"):
                fusion[k] = dict(fusion[k] or [])
    return {"problem": problems[0], "candidates": cands, "bon": bon, "fusion": fusion,
            "games": _games(cur, problem_id) if "pairwise" in have else []}


def problems_page(cat, run: dict, q: str, page: int, size: int) -> dict:
    """An open-ended run's problem list (it has no pass rates): each request with its candidates and the
    Best-of-N pick over all teachers (the candidate, its scorer and score); ``q``: text in the request."""
    need(cat, run, "problems", "candidates", "scores")
    cur = cat.cursor(run)
    where, params = ("contains(lower(p.question), ?)", [q.lower()]) if q else ("true", [])
    total = cur.execute(f"SELECT count(*) FROM problems p WHERE {where}", params).fetchall()[0][0]
    bon = ("(SELECT problem_id, candidate_id AS pick, scorer, value FROM bon WHERE pool = '*')"
           if "bon" in cat.views(run) else "(SELECT NULL::VARCHAR AS problem_id, NULL AS pick, NULL AS scorer, "
                                            "NULL AS value)")
    rows = _rows(cur, f"SELECT p.problem_id, p.domain, left(p.question, {SNIPPET}) AS question, "
                      "coalesce(c.n, 0) AS n, b.pick, b.scorer, b.value FROM (SELECT * FROM problems p "
                      f"WHERE {where} ORDER BY problem_id LIMIT ? OFFSET ?) p LEFT JOIN (SELECT problem_id, "
                      "count(*) AS n FROM candidates GROUP BY ALL) c USING (problem_id) "
                      f"LEFT JOIN {bon} b USING (problem_id) ORDER BY p.problem_id", [*params, size, page * size])
    return {"run_id": run.run_id, "open": True, "total": total, "page": page, "size": size, "rows": rows}


def scored(cur, have: set[str], problem_id: str, cands: list[dict]) -> list[dict]:
    """Gives each of a problem's candidates its ``scores`` (one entry per scorer) and ``bon`` (whether the
    Best-of-N over all teachers picked it); returns the problem's Best-of-N rows (all teachers first)."""
    scores: dict[str, list] = {}
    for s in _rows(cur, "SELECT candidate_id, scorer, kind, value, label, status, n_tokens, truncated FROM scores "
                        "WHERE problem_id = ? ORDER BY candidate_id, scorer", [problem_id]):
        scores.setdefault(s.pop("candidate_id"), []).append(s)
    bon = _rows(cur, "SELECT pool, scorer, n_candidates, n_eligible, candidate_id, value, runner_up, tie, filtered "
                     "FROM bon WHERE problem_id = ? ORDER BY pool = '*' DESC, pool", [problem_id]) \
        if "bon" in have else []
    for b in bon:
        b["filtered"] = dict(b["filtered"] or [])
    picked = {b["candidate_id"] for b in bon if b["pool"] == "*"}
    for c in cands:
        c["scores"], c["bon"] = scores.get(c["candidate_id"], []), c["candidate_id"] in picked
    return bon


def _games(cur, problem_id: str) -> list[dict]:
    """Per contender and baseline, both games (game 0: the contender shown as B; 1: as A) and the outcome."""
    out: dict[tuple, dict] = {}
    for g in _rows(cur, "SELECT contender, baseline, game, contender_id, baseline_id, label, n_labels, "
                        "contender_score, response FROM pairwise WHERE problem_id = ? "
                        "ORDER BY contender, baseline, game", [problem_id]):
        pair = out.setdefault((g["contender"], g["baseline"]), {
            "contender": g["contender"], "baseline": g["baseline"], "contender_id": g["contender_id"],
            "baseline_id": g["baseline_id"], "games": []})
        pair["games"].append({k: g[k] for k in ("game", "label", "n_labels", "contender_score", "response")})
    for pair in out.values():
        score = {g["game"]: g["contender_score"] for g in pair["games"]}
        pair["outcome"], pair["score"] = games.outcome(score.get(0), score.get(1))
    return list(out.values())
