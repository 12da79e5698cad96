"""What each page of the viewer shows, as DuckDB queries over a run's catalog. Values are bound as
parameters; the only SQL built from request input is an ORDER BY column picked from a fixed table."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa

from bonforge.attribution import MULTIPLE, UNMATCHED, attribute
from bonforge.errors import BonforgeError
from bonforge.schema import CODE_STATUSES, MATH_STATUSES
from bonforge.viewer.catalog import NotFound, need, views

SORTS = {"pass_rate": "rate", "n": "n", "n_correct": "n_correct", "problem_id": "problem_id",
         "domain": "domain", "keep": "keep"}
STATUSES = tuple(dict.fromkeys(MATH_STATUSES + CODE_STATUSES))
SNIPPET = 240  # characters of a question in the problem list


class BadRequest(BonforgeError, ValueError):
    """A request parameter is out of range or unknown; the message names it."""


# -- landing -------------------------------------------------------------------------------------------


def run_summary(cat, run: dict) -> dict:
    """A run's stages (key, rows, cached, seconds), its dataset versions and the problems it dropped."""
    cur = cat.cursor(run)
    stages = _dicts(cur.sql("SELECT stage, key, rows, cached, wall_s, compute_s FROM run_stages "
                            "WHERE stage IS NOT NULL ORDER BY stage, key"))
    if run.get("status") == "running":
        stages = committed_since(cat.store, run["started"])
    drops = []
    if "problem_stats" in views(cur):
        drops = _dicts(cur.sql("SELECT coalesce(drop_reason, 'kept') AS reason, count(*) AS problems "
                               "FROM problem_stats WHERE teacher = '*' GROUP BY ALL ORDER BY problems DESC, reason"))
    return {"run": _run_row(run), "stages": stages, "datasets": datasets(cat.store, run), "drops": drops,
            "views": sorted(views(cur) - {"runs", "run_stages"})}


def committed_since(store, started: str) -> list[dict]:
    """Stages committed since a build started (a running build records its stages when it ends)."""
    out = []
    for stage in store.loc.names(store.loc.path("stages")):
        for key in store.loc.names(store.loc.path("stages", stage)):
            if store.exists(stage, key):
                man = store.manifest(stage, key)
                if man.get("created", "") >= started[:19] + "Z":
                    out.append({"stage": stage, "key": key, "rows": man.get("rows"), "cached": False,
                                "wall_s": man.get("timings", {}).get("wall_s"),
                                "compute_s": man.get("timings", {}).get("compute_s")})
    return sorted(out, key=lambda s: (s["stage"], s["key"]))


def datasets(store, run: dict) -> list[dict]:
    out = []
    for field in ("dataset", "rl_dataset", "fusion_dataset"):
        path = run.get(field)
        if not path:
            continue
        try:
            man = json.loads(store.loc.read_bytes(store.loc.path(*_tail(path))))
        except (FileNotFoundError, OSError):
            man = {}
        out.append({"kind": field, "name": man.get("name"), "version": man.get("version"), "path": str(path),
                    "rows": man.get("rows")})
    return out


def _tail(path: str) -> list[str]:
    """``.../datasets/<name>/v<N>`` -> the store-relative parts of its manifest."""
    parts = str(path).rstrip("/").split("/")
    return [*parts[parts.index("datasets"):], "manifest.json"] if "datasets" in parts else [path, "manifest.json"]


def _run_row(run: dict) -> dict:
    keep = ("run_id", "recipe_name", "status", "started", "finished", "wall_s", "dataset", "dataset_version",
            "kind", "base_run", "error")
    return {k: run.get(k) for k in keep if k in run}


def run_list(cat) -> list[dict]:
    return [_run_row(r) for r in reversed(cat.runs())]


# -- problems ------------------------------------------------------------------------------------------


@dataclass
class ProblemFilter:
    teacher: str = "*"  # whose pass rate the range and the sort use
    min_rate: float = 0.0
    max_rate: float = 1.0
    kept: str = ""  # "", "kept" or "dropped"
    status: str = ""  # problems with at least one verdict of this status
    domain: str = ""
    q: str = ""  # text in the question
    sort: str = "problem_id"
    desc: bool = False

    def check(self) -> "ProblemFilter":
        if not 0.0 <= self.min_rate <= self.max_rate <= 1.0:
            raise BadRequest(f"pass-rate range [{self.min_rate}, {self.max_rate}] must lie in [0, 1], min <= max")
        if self.kept not in ("", "kept", "dropped"):
            raise BadRequest(f"kept must be kept or dropped, not {self.kept!r}")
        if self.status and self.status not in STATUSES:
            raise BadRequest(f"unknown verdict status {self.status!r}; choose one of {', '.join(STATUSES)}")
        if self.sort not in SORTS:
            raise BadRequest(f"cannot sort by {self.sort!r}; choose one of {', '.join(SORTS)}")
        return self


def problems_sql(f: ProblemFilter, have: set[str]) -> tuple[str, list]:
    """The filtered problem list (without paging) and its parameters."""
    where, params = ["s.teacher = '*'"], [f.teacher]
    where.append("r.pass_rate BETWEEN ? AND ?")
    params += [f.min_rate, f.max_rate]
    if f.kept:
        where.append("s.keep" if f.kept == "kept" else "NOT s.keep")
    if f.status and "verdicts" in have:
        where.append("s.problem_id IN (SELECT problem_id FROM verdicts WHERE status = ?)")
        params.append(f.status)
    if f.domain:
        where.append("p.domain = ?")
        params.append(f.domain)
    if f.q:
        where.append("contains(lower(p.question), lower(?))")
        params.append(f.q)
    sql = (
        "SELECT s.problem_id, p.domain, p.source, left(p.question, %d) AS question, r.pass_rate AS rate, "
        "s.pass_rate, s.n, s.n_correct, s.pass_at_k, s.majority_at_k, s.keep, s.drop_reason "
        "FROM problem_stats s JOIN problem_stats r ON r.problem_id = s.problem_id AND r.teacher = ? "
        "JOIN problems p ON p.problem_id = s.problem_id WHERE %s" % (SNIPPET, " AND ".join(where))
    )
    return sql, params


def order_by(f: ProblemFilter) -> str:
    return f" ORDER BY {SORTS[f.sort]} {'DESC' if f.desc else 'ASC'} NULLS LAST, problem_id"


def problems_page(cat, run: dict, f: ProblemFilter, page: int, size: int) -> dict:
    cur = cat.cursor(run)
    need(cur, run, "problems", "problem_stats")
    sql, params = problems_sql(f.check(), views(cur))
    total = cur.execute(f"SELECT count(*) FROM ({sql})", params).fetchall()[0][0]
    rows = _dicts(cur.sql(sql + order_by(f) + " LIMIT ? OFFSET ?", params=[*params, size, page * size]))
    ids = [r["problem_id"] for r in rows]
    per: dict[str, dict] = {}
    if ids:
        for pid, teacher, rate, n in cur.sql(
            "SELECT problem_id, teacher, pass_rate, n FROM problem_stats WHERE teacher <> '*' "
            "AND problem_id IN (SELECT unnest(?::VARCHAR[]))", params=[ids]).fetchall():
            per.setdefault(pid, {})[teacher] = {"pass_rate": rate, "n": n}
    for r in rows:
        r["teachers"] = per.get(r["problem_id"], {})
        r["pass_at_k"], r["majority_at_k"] = dict(r["pass_at_k"] or []), dict(r["majority_at_k"] or [])
    teachers = [t for (t,) in cur.sql("SELECT DISTINCT teacher FROM problem_stats WHERE teacher <> '*' "
                                      "ORDER BY teacher").fetchall()]
    domains = [d for (d,) in cur.sql("SELECT DISTINCT domain FROM problems WHERE domain IS NOT NULL "
                                     "ORDER BY domain").fetchall()]
    return {"total": total, "page": page, "size": size, "rows": rows, "teachers": teachers, "domains": domains,
            "statuses": list(STATUSES)}


def problems_table(cat, run: dict, f: ProblemFilter, cap: int) -> pa.Table:
    cur = cat.cursor(run)
    need(cur, run, "problems", "problem_stats")
    sql, params = problems_sql(f.check(), views(cur))
    sql = sql.replace(f"left(p.question, {SNIPPET})", "p.question")
    return cur.sql(sql + order_by(f) + " LIMIT ?", params=[*params, cap]).to_arrow_table()


# -- one problem ---------------------------------------------------------------------------------------

CANDIDATE_COLUMNS = (
    "c.candidate_id, c.teacher, c.sample_index, c.text, c.reasoning, c.finish_reason, c.prompt_tokens, "
    "c.completion_tokens, v.extracted, v.correct, v.reward, v.status, v.tests_passed, v.tests_total, v.detail, "
    "v.latency_ms"
)


def candidates_table(cat, run: dict, problem_id: str) -> pa.Table:
    cur = cat.cursor(run)
    need(cur, run, "candidates")
    join = "LEFT JOIN verdicts v USING (candidate_id)" if "verdicts" in views(cur) else (
        "LEFT JOIN (SELECT NULL::VARCHAR AS candidate_id, NULL AS extracted, NULL::BOOLEAN AS correct, NULL AS reward, "
        "NULL AS status, NULL AS tests_passed, NULL AS tests_total, NULL AS detail, NULL AS latency_ms) v "
        "USING (candidate_id)")
    return cur.sql(f"SELECT {CANDIDATE_COLUMNS} FROM candidates c {join} WHERE c.problem_id = ? "
                   "ORDER BY c.teacher, c.sample_index, c.candidate_id", params=[problem_id]).to_arrow_table()


def problem(cat, run: dict, problem_id: str) -> dict:
    cur = cat.cursor(run)
    need(cur, run, "problems")
    rows = _dicts(cur.sql("SELECT problem_id, source, domain, question, answer, tests, metadata FROM problems "
                          "WHERE problem_id = ?", params=[problem_id]))
    if not rows:
        raise NotFound(f"run {run['run_id']} has no problem {problem_id!r}")
    have = views(cur)
    stats = []
    if "problem_stats" in have:
        stats = _dicts(cur.sql("SELECT teacher, n, n_correct, pass_rate, mean_reward, pass_at_k, majority_at_k, "
                               "keep, drop_reason FROM problem_stats WHERE problem_id = ? ORDER BY teacher = '*' "
                               "DESC, teacher", params=[problem_id]))
        for s in stats:
            s["pass_at_k"], s["majority_at_k"] = dict(s["pass_at_k"] or []), dict(s["majority_at_k"] or [])
    cands = candidates_table(cat, run, problem_id).to_pylist() if "candidates" in have else []
    counts = {s: _count(cur, s, problem_id) for s in ("genselect", "fusion") if s in have}
    return {"problem": rows[0], "stats": stats, "candidates": cands, "has": counts}


def _count(cur, stage: str, problem_id: str) -> int:
    return cur.execute(f'SELECT count(*) FROM "{stage}" WHERE problem_id = ?', [problem_id]).fetchall()[0][0]


# -- GenSelect -----------------------------------------------------------------------------------------


def genselect(cat, run: dict, problem_id: str) -> dict:
    cur = cat.cursor(run)
    need(cur, run, "genselect")
    prompts = _dicts(cur.sql("SELECT prompt_id, prompt_index, candidate_ids, n_candidates, correct_indices, prompt, "
                             "n_tokens, token_counter FROM genselect WHERE problem_id = ? ORDER BY prompt_index",
                             params=[problem_id]))
    judged: dict[str, list] = {}
    if "selector_eval" in views(cur):
        for r in _dicts(cur.sql("SELECT prompt_id, run, judgment, parsed, correct, skipped, fallback_index, "
                                "fallback_correct, response FROM selector_eval WHERE problem_id = ? "
                                "ORDER BY prompt_id, run", params=[problem_id])):
            judged.setdefault(r.pop("prompt_id"), []).append(r)
    for p in prompts:
        p["judgments"] = judged.get(p["prompt_id"], [])
    return {"problem_id": problem_id, "prompts": prompts, "selector_eval": "selector_eval" in views(cur)}


# -- FusioN --------------------------------------------------------------------------------------------


def fusion(cat, run: dict, problem_id: str) -> dict:
    cur = cat.cursor(run)
    need(cur, run, "fusion", "fusion_pools", "candidates")
    pools = _dicts(cur.sql("SELECT candidate_ids, teachers, pool_seed FROM fusion_pools WHERE problem_id = ?",
                           params=[problem_id]))
    rows = _dicts(cur.sql("SELECT * FROM fusion WHERE problem_id = ?", params=[problem_id]))
    if not pools or not rows:
        raise NotFound(f"run {run['run_id']} has no fusion pool for problem {problem_id!r}")
    pool, row = pools[0], rows[0]
    row["teacher_chars"] = dict(row["teacher_chars"] or [])
    cands = {c["candidate_id"]: c for c in candidates_table(cat, run, problem_id).to_pylist()}
    members = [cands.get(cid, {"candidate_id": cid, "teacher": t, "text": ""})
               for cid, t in zip(pool["candidate_ids"], pool["teachers"])]
    fused = cands.get(row["fused_candidate_id"] or "", {})
    labels = attribute(fused.get("text") or "", [(m["teacher"], m.get("text") or "") for m in members],
                       _min_span(cat.store, run))
    return {"problem_id": problem_id, "pool": members, "fusion": row, "fused": fused,
            "segments": segments(fused.get("text") or "", labels), "legend": [*sorted(set(pool["teachers"])),
                                                                              MULTIPLE, UNMATCHED]}


def _min_span(store, run: dict) -> int:
    (key,) = run["stages"]["fusion"][:1]
    return int(store.manifest("fusion", key).get("config", {}).get("min_span", 16))


def segments(text: str, labels: list[str]) -> list[dict]:
    """Runs of characters with one owner: [{owner, text}]."""
    out: list[dict] = []
    for ch, owner in zip(text, labels):
        if out and out[-1]["owner"] == owner:
            out[-1]["text"] += ch
        else:
            out.append({"owner": owner, "text": ch})
    return out


def _dicts(rel) -> list[dict]:
    return rel.to_arrow_table().to_pylist() if rel is not None else []
