"""What each page of the viewer shows, as DuckDB queries over a run's catalog. Values are bound as
parameters; the only SQL built from request input is an ORDER BY column picked from a fixed table."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pyarrow as pa

from bonforge.report import labels
from bonforge.schema import REFERENCE_TEACHER
from bonforge.selection.attribution import MULTIPLE, UNMATCHED, attribute
from bonforge.errors import BonforgeError
from bonforge.viewer import open_views
from bonforge.viewer.catalog import (CANDIDATE_COLUMNS, MAJORITY_WRONG, SNIPPET, STATUSES, VERDICT_COLUMNS, NotFound,
                                     messages_column, need)

SORTS = {"pass_rate": "rate", "n": "n", "n_correct": "n_correct", "problem_id": "problem_id",
         "domain": "domain", "keep": "keep"}


class BadRequest(BonforgeError, ValueError):
    """A request parameter is out of range or unknown; the message names it."""


# -- landing -------------------------------------------------------------------------------------------


def run_summary(cat, run: dict) -> dict:
    """A run's stages (teacher, key, rows, cached, seconds), its dataset versions and the problems it dropped."""
    cur = cat.cursor(run)
    if run.status == "running":
        stages = committed_since(cat.store, run.started)
    elif run.stages:
        stages = _rows(cur, "SELECT stage, teacher, key, rows, cached, wall_s, compute_s FROM run_stages "
                            "ORDER BY stage, teacher, key", [])
    else:
        stages = []
    drops = []
    if "problem_stats" in cat.views(run):
        drops = _rows(cur, "SELECT coalesce(drop_reason, 'kept') AS reason, count(*) AS problems FROM problem_stats "
                           "WHERE teacher = '*' GROUP BY ALL ORDER BY problems DESC, reason", [])
    return {"run": _run_row(run), "stages": stages, "datasets": datasets(cat.store, run), "drops": drops,
            "views": sorted(cat.views(run) - {"runs", "run_stages"})}


def committed_since(store, started: str) -> list[dict]:
    """Stages committed since a build started (a running build records its stages when it ends)."""
    out = []
    for stage in store.loc.names(store.loc.path("stages")):
        for key in store.loc.names(store.loc.path("stages", stage)):
            if store.exists(stage, key):
                man = store.manifest(stage, key)
                if man.created >= started[:19] + "Z":
                    out.append({"stage": stage, "teacher": man.extra.get("teacher"), "key": key, "rows": man.rows,
                                "cached": False,
                                "wall_s": man.timings.get("wall_s"), "compute_s": man.timings.get("compute_s")})
    return sorted(out, key=lambda s: (s["stage"], s["key"]))


def datasets(store, run: dict) -> list[dict]:
    out = []
    for field in ("dataset", "rl_dataset", "fusion_dataset", "preference_dataset"):
        path = run.get(field)
        if not path:
            continue
        try:
            man = json.loads(store.loc.read_bytes(store.loc.path(*_tail(path))))
        except (FileNotFoundError, OSError):
            man = {}
        rows = {name: f.get("rows") for name, f in man.get("files", {}).items() if isinstance(f, dict)}
        out.append({"kind": field, "name": man.get("name"), "version": man.get("version"), "path": str(path),
                    "rows": rows})
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
    majority: str = ""  # "wrong" / "right": the most frequent extracted answer is wrong / right
    domain: str = ""
    q: str = ""  # text in the question
    sort: str = "problem_id"
    desc: bool = False

    def check(self) -> "ProblemFilter":
        if not 0.0 <= self.min_rate <= self.max_rate <= 1.0:
            raise BadRequest(f"pass-rate range [{self.min_rate}, {self.max_rate}] must lie in [0, 1], min <= max")
        if self.kept not in ("", "kept", "dropped"):
            raise BadRequest(f"kept must be kept or dropped, not {self.kept!r}")
        if self.majority not in ("", "wrong", "right"):
            raise BadRequest(f"majority must be wrong or right, not {self.majority!r}")
        if self.status and self.status not in STATUSES:
            raise BadRequest(f"unknown verdict status {self.status!r}; choose one of {', '.join(STATUSES)}")
        if self.sort not in SORTS:
            raise BadRequest(f"cannot sort by {self.sort!r}; choose one of {', '.join(SORTS)}")
        return self


def _where(f: ProblemFilter, teachers: list[str]) -> tuple[str, str, list]:
    """(rate expression, WHERE clause, parameters) of the filtered problem list over the problem index."""
    rate = "s.pass_rate" if f.teacher == "*" else f"s.rate_{teachers.index(f.teacher)}"
    where, params = [f"{rate} BETWEEN ? AND ?"], [f.min_rate, f.max_rate]
    if f.kept:
        where.append("s.keep" if f.kept == "kept" else "NOT s.keep")
    if f.status:
        where.append("(s.status_mask & ?) <> 0")
        params.append(1 << STATUSES.index(f.status))
    if f.majority:
        where.append("s.majority_wrong" if f.majority == "wrong" else "NOT s.majority_wrong")
    if f.domain:
        where.append("s.domain = ?")
        params.append(f.domain)
    if f.q:
        where.append("contains(s.question_lc, ?)")
        params.append(f.q.lower())
    return rate, " AND ".join(where), params


def _columns(teachers: list[str], question: str) -> str:
    per = ", ".join(f"'{t}': s.rate_{i}" for i, t in enumerate(t.replace("'", "''") for t in teachers))
    return (f"s.problem_id, s.domain, s.source, {question} AS question, s.pass_rate, s.n, s.n_correct, "
            f"s.pass_at_k, s.majority_at_k, s.keep, s.drop_reason, {'{' + per + '}' if teachers else 'NULL'} "
            "AS teachers")


def _order(f: ProblemFilter) -> str:
    return f"{SORTS[f.sort]} {'DESC' if f.desc else 'ASC'} NULLS LAST, problem_id"


def _teachers(cur, f: ProblemFilter) -> list[str]:
    """The run's teachers (index order); an unknown ``f.teacher`` is a BadRequest."""
    f.check()
    teachers = [t for (t,) in cur.execute("SELECT teacher FROM viewer.teachers ORDER BY i").fetchall()]
    if f.teacher != "*" and f.teacher not in teachers:
        raise BadRequest(f"unknown teacher {f.teacher!r}; choose one of {', '.join(teachers)}")
    return teachers


def problems_page(cat, run: dict, f: ProblemFilter, page: int, size: int) -> dict:
    """One page of the list: the page's ids are picked on the narrow columns, then only its rows are
    read whole (through the index's primary key). An open-ended run (scores, no pass rates) has its own
    list (``open_views.problems_page``): only the search applies there."""
    if "problem_stats" not in cat.views(run) and "scores" in cat.views(run):
        if replace(f, q="") != ProblemFilter():
            raise BadRequest(f"run {run.run_id} is open-ended: it has no pass rates, verdicts or keep decisions "
                             "to filter or sort by (search its requests with q)")
        return open_views.problems_page(cat, run, f.q, page, size)
    need(cat, run, "problems", "problem_stats")
    cur = cat.index(run)
    teachers = _teachers(cur, f)
    rate, where, params = _where(f, teachers)
    total = cur.execute(f"SELECT count(*) FROM viewer.problems_index s WHERE {where}", params).fetchall()[0][0]
    picked = cur.execute(f"SELECT s.problem_id, s.domain, s.n, s.n_correct, s.keep, {rate} AS rate FROM "
                         f"viewer.problems_index s WHERE {where} ORDER BY {_order(f)} LIMIT ? OFFSET ?",
                         [*params, size, page * size]).fetchall()
    ids = [p[0] for p in picked]
    found = {r["problem_id"]: r for r in _rows(
        cur, f"SELECT {_columns(teachers, f'left(s.question, {SNIPPET})')} FROM viewer.problems_index s "
             "WHERE s.problem_id IN (SELECT unnest(?::VARCHAR[]))", [ids])}
    rows = [{**found[pid], "rate": p[-1]} for pid, p in zip(ids, picked)]
    domains = [d for (d,) in cur.execute("SELECT domain FROM viewer.domains ORDER BY domain").fetchall()]
    return {"run_id": run.run_id, "total": total, "page": page, "size": size, "rows": rows,
            "teachers": sorted(teachers),
            "domains": domains, "statuses": list(STATUSES)}


def problems_table(cat, run: dict, f: ProblemFilter, cap: int) -> pa.Table:
    need(cat, run, "problems", "problem_stats")
    cur = cat.index(run)
    teachers = _teachers(cur, f)
    rate, where, params = _where(f, teachers)
    return cur.sql(f"SELECT {_columns(teachers, 's.question')}, {rate} AS rate FROM viewer.problems_index s "
                   f"WHERE {where} ORDER BY {_order(f)} LIMIT ?", params=[*params, cap]).to_arrow_table()


# -- teachers ------------------------------------------------------------------------------------------


def teachers(cat, run: dict) -> dict:
    """Per teacher (and ``*``, all together): accuracy over its verdicts, candidates and problems, the mean
    pass@k and majority@k of its problems (problem_stats), and the problems whose majority answer is wrong;
    best accuracy first."""
    if "verdicts" not in cat.views(run):
        return {"run_id": run.run_id, "teachers": []}
    cur = cat.cursor(run)
    out = _rows(cur, "SELECT teacher, avg(correct::INT) AS accuracy, count(*) AS candidates, "
                     "count(DISTINCT problem_id) AS problems FROM verdicts GROUP BY teacher UNION ALL "
                     "SELECT '*', avg(correct::INT), count(*), count(DISTINCT problem_id) FROM verdicts "
                     "ORDER BY teacher = '*' DESC, accuracy DESC, teacher", [])
    by = {t["teacher"]: t for t in out}
    for t in out:
        t.update(pass_at_k={}, majority_at_k={}, majority_wrong=None)
    if "problem_stats" in cat.views(run):
        for column in ("pass_at_k", "majority_at_k"):
            for teacher, k, mean in cur.execute(
                    f"SELECT teacher, e.key, avg(e.value) FROM (SELECT teacher, unnest(map_entries({column})) AS e "
                    "FROM problem_stats) GROUP BY ALL ORDER BY ALL").fetchall():
                if teacher in by:
                    by[teacher][column][k] = mean
    for teacher, n in cur.execute(f"SELECT teacher, count(*) FILTER (WHERE wrong) FROM ({MAJORITY_WRONG}) "
                                  "GROUP BY teacher").fetchall():
        if teacher in by:
            by[teacher]["majority_wrong"] = n
    return {"run_id": run.run_id, "teachers": out}


# -- one problem ---------------------------------------------------------------------------------------


def candidates_table(cat, run: dict, problem_id: str) -> pa.Table:
    """A problem's candidates with their verdicts (nulls where the run has none yet) and whether the label an
    imported pool published disagrees with our verdict (``label_disagrees``)."""
    need(cat, run, "candidates")
    disagrees = f"{labels.DISAGREES} AS label_disagrees"
    cols = ", ".join(CANDIDATE_COLUMNS + ("messages",) + VERDICT_COLUMNS + (disagrees,))
    source, key = cat.sorted_source(run, "cands", problem_id), "problem_id"
    if source is None:
        key = "c.problem_id"
        cols = ", ".join([*(f"c.{c}" for c in CANDIDATE_COLUMNS), messages_column(cat.views(run))])
        if "verdicts" in cat.views(run):
            cols += ", " + ", ".join([*(f"v.{c}" for c in VERDICT_COLUMNS), disagrees])
            source = "candidates c LEFT JOIN (SELECT * FROM verdicts WHERE problem_id = $id) v USING (candidate_id)"
        else:
            cols += ", " + ", ".join([*(f"NULL AS {c}" for c in VERDICT_COLUMNS), "false AS label_disagrees"])
            source = "candidates c"
    sql = f"SELECT {cols} FROM {source} WHERE {key} = $id ORDER BY teacher, sample_index, candidate_id"
    return cat.cursor(run).sql(sql, params={"id": problem_id}).to_arrow_table()


def problem(cat, run: dict, problem_id: str) -> dict:
    need(cat, run, "problems")
    have = cat.views(run)
    cur = cat.index(run)
    problems = cat.sorted_source(run, "problems", problem_id) or "problems"
    rows = _rows(cur, f"SELECT problem_id, source, domain, question, answer, tests, metadata FROM {problems} "
                      "WHERE problem_id = ?", [problem_id])
    if not rows:
        raise NotFound(f"run {run.run_id} has no problem {problem_id!r}")
    stats, counts = [], {}
    if "problem_stats" in have:
        source = cat.sorted_source(run, "stats", problem_id) or "problem_stats"
        strength = [c for c in ("n_known_wrong", "suite_strength", "drop_detail")  # older stores lack them
                    if c in {d[0] for d in cur.execute(f"SELECT * FROM {source} LIMIT 0").description}]
        stats = _rows(cur, "SELECT teacher, n, n_correct, pass_rate, mean_reward, pass_at_k, majority_at_k, keep, "
                           f"{''.join(c + ', ' for c in strength)}drop_reason FROM {source} WHERE problem_id = ? "
                           "ORDER BY teacher = '*' DESC, teacher", [problem_id])
        counts["genselect"] = _value(cur, "SELECT n_prompts FROM viewer.problems_index WHERE problem_id = ?",
                                     problem_id)
    if "fusion" in have:
        counts["fusion"] = _value(cur, "SELECT count(*) FROM fusion WHERE problem_id = ?", problem_id)
    if "scores" in have:
        counts["open"] = _value(cur, "SELECT count(*) FROM scores WHERE problem_id = ?", problem_id)
    cands = candidates_table(cat, run, problem_id).to_pylist() if "candidates" in have else []
    bon = open_views.scored(cur, have, problem_id, cands) if "scores" in have else []
    return {"problem": rows[0], "stats": stats, "candidates": cands, "has": counts, "bon": bon,
            "imported": imported(run)}


def imported(run: dict) -> list[str]:
    """The run's teachers whose candidates were imported, not sampled (its recipe's pool teachers and the
    problems' reference solutions): they have no latency, finish reason or token counts."""
    recipe = run.get("recipe") or {}
    names = [t.get("name") for t in recipe.get("teachers") or [] if t.get("engine") == "pool"]
    return names + [REFERENCE_TEACHER] * bool((recipe.get("problems") or {}).get("include_reference"))


# -- published labels ----------------------------------------------------------------------------------


def label_disagreements(cat, run: dict, teacher: str, way: str, page: int, size: int) -> dict:
    """Per teacher with published labels, the candidates labelled and how many disagree with our verdicts
    (``bonforge.report.labels``); then one page of those candidates (of ``teacher``, one ``way``: the label
    wrong where we say correct, or the reverse; default: both)."""
    need(cat, run, "candidates", "verdicts")
    cur = cat.cursor(run)
    teachers = [{k: r[k] for k in ("teacher", "labelled", "disagree")} for r in labels.disagreements(cur)]
    if way and way not in labels.WAYS:
        raise BadRequest(f"way must be one of {', '.join(labels.WAYS)}, not {way!r}")
    if teacher and teacher not in {t["teacher"] for t in teachers}:
        raise BadRequest(f"teacher {teacher!r} has no published labels in run {run.run_id}")
    where = f"({labels.WAYS[way] if way else labels.DISAGREES})" + (" AND c.teacher = ?" if teacher else "")
    params = [teacher] if teacher else []
    source = f"candidates c JOIN verdicts v USING (candidate_id) WHERE {where}"
    total = _value(cur, f"SELECT count(*) FROM {source}", *params)
    rows = _rows(cur, "SELECT c.candidate_id, c.problem_id, c.teacher, c.sample_index, v.status, v.correct, "
                      f"c.reference_correct, v.extracted FROM {source} ORDER BY c.problem_id, c.teacher, "
                      "c.sample_index, c.candidate_id LIMIT ? OFFSET ?", [*params, size, page * size])
    return {"run_id": run.run_id, "teachers": teachers, "ways": list(labels.WAYS), "total": total, "page": page,
            "size": size, "rows": rows}


def _value(cur, sql: str, *params):
    found = cur.execute(sql, list(params)).fetchall()
    return found[0][0] if found else None


def _rows(cur, sql: str, params) -> list[dict]:
    """Rows as dicts (through the DB-API: a relation would plan and run the query twice)."""
    cur.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


# -- GenSelect -----------------------------------------------------------------------------------------


def genselect(cat, run: dict, problem_id: str) -> dict:
    need(cat, run, "genselect")
    cur = cat.cursor(run)
    prompts = _rows(cur, "SELECT prompt_id, prompt_index, candidate_ids, n_candidates, correct_indices, prompt, "
                         "n_tokens, token_counter FROM genselect WHERE problem_id = ? ORDER BY prompt_index",
                    [problem_id])
    judged: dict[str, list] = {}
    if "selector_eval" in cat.views(run):
        for r in _rows(cur, "SELECT prompt_id, run, judgment, parsed, correct, skipped, fallback_index, "
                            "fallback_correct, response FROM selector_eval WHERE problem_id = ? "
                            "ORDER BY prompt_id, run", [problem_id]):
            judged.setdefault(r.pop("prompt_id"), []).append(r)
    for p in prompts:
        p["judgments"] = judged.get(p["prompt_id"], [])
    return {"problem_id": problem_id, "prompts": prompts, "selector_eval": "selector_eval" in cat.views(run)}


# -- FusioN --------------------------------------------------------------------------------------------


def fusion(cat, run: dict, problem_id: str) -> dict:
    need(cat, run, "fusion", "fusion_pools", "candidates")
    cur = cat.cursor(run)
    pools = _rows(cur, "SELECT candidate_ids, teachers, pool_seed FROM fusion_pools WHERE problem_id = ?", [problem_id])
    rows = _rows(cur, "SELECT * FROM fusion WHERE problem_id = ?", [problem_id])
    if not pools or not rows:
        raise NotFound(f"run {run.run_id} has no fusion pool for problem {problem_id!r}")
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
    (key,) = run.stages["fusion"][:1]
    return int(store.manifest("fusion", key).config.get("min_span", 16))


def segments(text: str, labels: list[str]) -> list[dict]:
    """Runs of characters with one owner: [{owner, text}]."""
    out: list[dict] = []
    for ch, owner in zip(text, labels):
        if out and out[-1]["owner"] == owner:
            out[-1]["text"] += ch
        else:
            out.append({"owner": owner, "text": ch})
    return out


