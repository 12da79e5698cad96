"""`bonforge diff`: the same candidates judged in two runs, side by side. Rows are matched by their keys
(``problem_id``, ``candidate_id``, and the scorer for open-ended scores), never by position; what flipped,
a confusion table of the statuses, the agreement (Cohen's kappa over statuses, and for verdicts over
correct / incorrect) and, from each run's ``problem_stats``, the pass rates and the filter's keep / drop
decisions that changed.

The work is DuckDB's, over the stage outputs' Parquet files, in one pass over the full join of the two sides:
per cell of the confusion table its rows, its flips and its first ``limit`` flips by key (``min_by(row, key,
n)``); only those aggregates, and the same for the problems, come to Python (1M candidates judged twice:
``benchmarks/diff.py``). Runs are resolved from their records (ids, unambiguous
prefixes or a recipe's latest runs); no user value is ever written into SQL text (the teacher is a parameter).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

import duckdb

from bonforge.errors import StoreError
from bonforge.storage.run_record import RunRecord
from bonforge.storage.store import StageStore

LIMIT = 50  # rows of each list (flips, problems) by default


@dataclass(frozen=True)
class Judged:
    """A judged stage: its row keys, its categorical label, its boolean label (None: none) and its number."""

    keys: tuple[str, ...]
    status: str
    correct: str | None
    value: str
    shown: tuple[str, ...]  # what a flip shows of each side


STAGES = {
    "verdicts": Judged(("problem_id", "candidate_id"), "status", "correct", "reward",
                       ("status", "correct", "reward", "extracted")),
    "scores": Judged(("problem_id", "candidate_id", "scorer"), "status", None, "value", ("status", "value", "label")),
}


class DiffError(StoreError):
    """Two runs that cannot be compared as asked (unknown, ambiguous, nothing judged in common)."""


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def resolve(store: StageStore, run_id: str | None, recipe: str | None = None) -> RunRecord:
    """The run ``run_id`` names (its id, or a prefix that only it has), of ``recipe`` where given; without an
    id, the recipe's (or the store's) default run. An ambiguous prefix is an error listing what it matches."""
    if run_id is not None:
        runs = [r for r in store.runs() if recipe is None or r.recipe_name == recipe]
        hits = [r for r in runs if r.run_id == run_id] or [r for r in runs if r.run_id.startswith(run_id)]
        if len(hits) > 1:
            some = ", ".join(r.run_id for r in hits[:4]) + (", ..." if len(hits) > 4 else "")
            raise DiffError(f"run id prefix {_shown(run_id)} is ambiguous: {len(hits)} runs start with it ({some}); "
                            "give more of the id")
        if hits:
            return hits[0]
    try:
        return store.run(run_id, recipe)
    except StoreError as e:
        raise DiffError(str(e).replace(repr(run_id), _shown(run_id or ""))) from None


def pair(store: StageStore, a: str | None, b: str | None, recipe: str | None = None) -> tuple[RunRecord, RunRecord]:
    """The two runs to compare: ``a`` and ``b``; with ``recipe`` and no ``b``, ``a`` (default: the recipe's run
    before its latest) against the recipe's latest run."""
    if b is not None or recipe is None:
        if a is None or b is None:
            raise DiffError("name two runs (RUN_A RUN_B), or a recipe (--recipe NAME) for its two latest runs")
        return resolve(store, a, recipe), resolve(store, b, recipe)
    runs = [r for r in store.runs() if r.recipe_name == recipe and r.status == "succeeded"]
    latest = resolve(store, None, recipe)
    if a is not None:
        return resolve(store, a, recipe), latest
    if len(runs) < 2:
        raise DiffError(f"recipe {_shown(recipe)} has {len(runs)} succeeded run(s) in {store.root}: two are needed to "
                        "compare (or name the runs)")
    return runs[-2], runs[-1]


def _outputs(store: StageStore, run: RunRecord, stage: str, teacher: str | None) -> list[str]:
    """The committed outputs of ``stage`` in ``run`` (of ``teacher`` where its manifests name one)."""
    keys = [k for k in run.stages.get(stage, []) if store.exists(stage, k)]
    if not keys:
        raise DiffError(f"run {run.run_id} has no committed {stage} stage: nothing to compare")
    if teacher is None:
        return keys
    named = {k: store.manifest(stage, k).extra.get("teacher") for k in keys}
    kept = [k for k in keys if named[k] in (teacher, None)]
    if not kept:
        raise DiffError(f"run {run.run_id} has no {stage} of teacher {_shown(teacher)} "
                        f"(its teachers: {', '.join(sorted(filter(None, named.values())))})")
    return kept


def _files(store: StageStore, stage: str, keys: list[str]) -> list[str]:
    return [str(p) for k in keys for p in store.paths(stage, k)]


def _stage_of(store: StageStore, a: RunRecord, b: RunRecord, stage: str | None) -> str:
    if stage is not None:
        if stage not in STAGES:
            raise DiffError(f"stage {_shown(stage)} cannot be compared; choose {' or '.join(STAGES)}")
        return stage
    for name in STAGES:
        if all(any(store.exists(name, k) for k in r.stages.get(name, [])) for r in (a, b)):
            return name
    lacking = b if any(store.exists("verdicts", k) for k in a.stages.get("verdicts", [])) else a
    raise DiffError(f"run {lacking.run_id} has no committed verdicts or scores: nothing to compare")


def diff(store: StageStore, a: RunRecord, b: RunRecord, stage: str | None = None, teacher: str | None = None,
         limit: int = LIMIT, memory_bytes: int | None = None) -> dict:
    """The comparison of run ``a`` (before) with run ``b`` (after) over ``stage`` (default: verdicts where both
    runs have them, else scores), of one ``teacher`` or all, as plain data (what ``--json`` prints)."""
    stage = _stage_of(store, a, b, stage)
    sides = {"a": (a, _outputs(store, a, stage, teacher)), "b": (b, _outputs(store, b, stage, teacher))}
    out = {"stage": stage, "teacher": teacher,
           **{name: {"run_id": run.run_id, "recipe": run.recipe_name, "keys": keys}
              for name, (run, keys) in sides.items()}}
    con = store.duckdb()
    try:
        if memory_bytes:
            con.execute("SET memory_limit = ?", [f"{memory_bytes}B"])
        for name, (_, keys) in sides.items():
            con.read_parquet(_files(store, stage, keys), union_by_name=True).create_view(f"{name}_all")
        out |= _join(con, STAGES[stage], teacher, limit, a.run_id, b.run_id)
        out["problems"] = _problems(store, con, a, b, teacher, limit) if stage == "verdicts" else None
        return out
    except duckdb.Error as e:  # a file gone (gc) or damaged, past the memory limit: one line, naming the runs
        first = next((x.strip() for x in str(e).splitlines() if x.strip()), type(e).__name__)
        raise DiffError(f"cannot compare runs {a.run_id} and {b.run_id}: {first}") from None
    finally:
        con.close()


def _join(con, judged: Judged, teacher: str | None, limit: int, run_a: str, run_b: str) -> dict:
    """One pass over the full join of the two sides: per cell of (status, correct, teacher) on each side its rows,
    its flips and changed values, and its first ``limit`` flips by key (DuckDB's ``min_by(..., n)``)."""
    keys = ", ".join(judged.keys)
    labels = list(dict.fromkeys([judged.status, judged.value, *([judged.correct] if judged.correct else []),
                                 "teacher", *judged.shown]))
    side = lambda s: (f"(SELECT {keys}, {', '.join(labels)} FROM {s}_all "  # noqa: E731
                      "WHERE $teacher IS NULL OR teacher = $teacher)")
    pick = ", ".join(f"{s}.{c} AS {c}_{s}" for s in "ab" for c in labels)
    flip = " OR ".join(f"{c}_a IS DISTINCT FROM {c}_b" for c in (
        [judged.status, judged.correct] if judged.correct else [judged.status, judged.value, "label"]))
    groups = [f"{c}_{s}" for c in (judged.status, judged.correct) if c for s in "ab"]
    row = ", ".join([*(f"{k} := {k}" for k in judged.keys), "teacher := coalesce(teacher_a, teacher_b)",
                     *(f"{c}_{s} := {c}_{s}" for s in "ab" for c in judged.shown)])
    order = ", ".join(f"{k} := {k}" for k in judged.keys)
    cells = con.execute(
        f"SELECT {', '.join(groups)}, coalesce(teacher_a, teacher_b) AS teacher, count(*) AS n, "
        f"count(*) FILTER (WHERE {flip}) AS flipped, "
        f"count(*) FILTER (WHERE {judged.value}_a IS DISTINCT FROM {judged.value}_b) AS moved, "
        f"min_by(struct_pack({row}), struct_pack({order}), {max(int(limit), 1)}) FILTER (WHERE {flip}) AS flips "
        f"FROM (SELECT {keys}, {pick} FROM {side('a')} a FULL JOIN {side('b')} b USING ({keys})) GROUP BY ALL",
        {"teacher": teacher}).fetchall()
    width = len(groups)
    matched = [c for c in cells if c[0] is not None and c[1] is not None]
    n = sum(c[width + 1] for c in matched)
    if not n:
        raise DiffError(f"runs {run_a} and {run_b} judged no candidate in common (rows matched by "
                        f"{', '.join(judged.keys)}): nothing to compare")
    status = _table([(c[0], c[1], c[width + 1]) for c in matched])
    out = {
        "matched": n,
        "only_a": sum(c[width + 1] for c in cells if c[1] is None),
        "only_b": sum(c[width + 1] for c in cells if c[0] is None),
        "flipped": sum(c[width + 2] for c in matched),
        f"{judged.value}_changed": sum(c[width + 3] for c in matched),
        "confusion": [{"a": x, "b": y, "n": k} for (x, y), k in sorted(status.items())],
        "agreement": {"status": _agreement(status)},
    }
    if judged.correct:
        out["agreement"]["correct"] = _agreement(_table([(c[2], c[3], c[width + 1]) for c in matched]))
    per = _table([(c[width], "matched", c[width + 1]) for c in matched] + [(c[width], "flipped", c[width + 2])
                                                                            for c in matched])
    out["teachers"] = [{"teacher": t, "matched": per[(t, "matched")], "flipped": per[(t, "flipped")]}
                       for t in sorted({t for t, _ in per})]
    flips = sorted((f for c in matched for f in c[-1] or []), key=lambda f: tuple(f[k] for k in judged.keys))
    out["flips"] = [{**{k: f[k] for k in judged.keys}, "teacher": f["teacher"],
                     **{s: {c: f[f"{c}_{s}"] for c in judged.shown} for s in "ab"},
                     "view": {s: problem_link(r, f["problem_id"], f["candidate_id"])
                              for s, r in (("a", run_a), ("b", run_b))}} for f in flips[:limit]]
    return out


def _table(cells: list[tuple]) -> dict[tuple, int]:
    out: dict[tuple, int] = {}
    for x, y, n in cells:
        out[(x, y)] = out.get((x, y), 0) + n
    return out


def _agreement(table: dict[tuple, int]) -> dict:
    """The share of rows with the same label on both sides and Cohen's kappa, (p_o - p_e) / (1 - p_e) with
    p_e the agreement expected from each side's label frequencies; kappa is null where p_e is 1 (one label
    on both sides: agreement by chance alone)."""
    n = sum(table.values())
    rows: dict = {}
    cols: dict = {}
    for (x, y), k in table.items():
        rows[x] = rows.get(x, 0) + k
        cols[y] = cols.get(y, 0) + k
    p_o = sum(k for (x, y), k in table.items() if x == y) / n
    p_e = sum(rows[x] * cols.get(x, 0) for x in rows) / (n * n)
    return {"observed": p_o, "kappa": None if p_e >= 1 else (p_o - p_e) / (1 - p_e)}


def _problems(store: StageStore, con, a: RunRecord, b: RunRecord, teacher: str | None, limit: int) -> dict | None:
    """Per problem: the pass rate (of ``teacher``, else of all teachers) and the filter's decision in each run,
    from its ``problem_stats``; None where a run has none."""
    for name, run in (("a", a), ("b", b)):
        keys = [k for k in run.stages.get("problem_stats", []) if store.exists("problem_stats", k)]
        files = _files(store, "problem_stats", keys)
        if not files:
            return None
        con.read_parquet(files, union_by_name=True).create_view(f"{name}_stats")
    side = lambda s: ("(SELECT problem_id, max(pass_rate) FILTER (WHERE teacher = coalesce($teacher, '*')) AS rate, "  # noqa: E731
                      "bool_or(keep) FILTER (WHERE teacher = '*') AS keep, max(drop_reason) FILTER (WHERE teacher "
                      f"= '*') AS why FROM {s}_stats GROUP BY problem_id)")
    changed = "rate_a IS DISTINCT FROM rate_b OR keep_a IS DISTINCT FROM keep_b"
    row = ", ".join(f"{c} := {c}" for c in ("problem_id", "rate_a", "rate_b", "keep_a", "keep_b", "why_a", "why_b"))
    (compared, moved, lost, gained, kept_a, kept_b, listed), = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE rate_a IS DISTINCT FROM rate_b), count(*) FILTER (WHERE keep_a AND "
        "NOT keep_b), count(*) FILTER (WHERE keep_b AND NOT keep_a), count(*) FILTER (WHERE keep_a), "
        f"count(*) FILTER (WHERE keep_b), min_by(struct_pack({row}), struct_pack(d := -abs(coalesce(rate_b, 0) - "
        f"coalesce(rate_a, 0)), problem_id := problem_id), {max(int(limit), 1)}) FILTER (WHERE {changed}) FROM ("
        "SELECT problem_id, a.rate AS rate_a, b.rate AS rate_b, a.keep AS keep_a, b.keep AS keep_b, a.why AS why_a, "
        f"b.why AS why_b FROM {side('a')} a JOIN {side('b')} b USING (problem_id))", {"teacher": teacher}).fetchall()
    names = {"rate_a": "pass_rate_a", "rate_b": "pass_rate_b", "why_a": "drop_reason_a", "why_b": "drop_reason_b"}
    listed = [{names.get(k, k): v for k, v in r.items()} | {"view": {s: problem_link(run, r["problem_id"]) for s, run
                                                                    in (("a", a.run_id), ("b", b.run_id))}}
              for r in (listed or [])[:limit]]
    return {"compared": compared, "pass_rate_changed": moved, "kept_to_dropped": lost, "dropped_to_kept": gained,
            "kept_a": kept_a, "kept_b": kept_b, "changed": listed}


def problem_link(run_id: str, problem_id: str, candidate_id: str | None = None) -> str:
    """The viewer's address of a problem's page in a run (its candidate ``candidate_id`` in view): the part
    after the viewer's URL."""
    params = {"run": run_id, "id": problem_id, **({"cand": candidate_id} if candidate_id else {})}
    return "#problem?" + urlencode(params)


def diff_link(run_a: str, run_b: str, stage: str | None = None, teacher: str | None = None) -> str:
    """The viewer's address of this comparison."""
    params = {"a": run_a, "b": run_b, "stage": stage, "teacher": teacher}
    return "#diff?" + urlencode({k: v for k, v in params.items() if v})


def lines(result: dict, link_base: str = "") -> list[str]:
    """The comparison in words, for the command line."""
    a, b = result["a"], result["b"]
    out = [f"{result['stage']} of {a['run_id']} ({a['recipe']}) -> {b['run_id']} ({b['recipe']})"
           + (f", teacher {result['teacher']}" if result["teacher"] else ""),
           f"matched {result['matched']} rows (only in A {result['only_a']}, only in B {result['only_b']}); "
           f"flipped {result['flipped']}"]
    agree = result["agreement"]
    out.append("agreement: " + "; ".join(f"{what} {100 * v['observed']:.2f} %, kappa {_kappa(v['kappa'])}"
                                         for what, v in agree.items()))
    out.append("confusion (A -> B: rows):")
    out += [f"  {c['a']} -> {c['b']}: {c['n']}" for c in result["confusion"]]
    if len(result["teachers"]) > 1:
        out.append("by teacher: " + ", ".join(f"{t['teacher']} {t['flipped']}/{t['matched']} flipped"
                                              for t in result["teachers"]))
    if result["flips"]:
        out.append(f"flips (first {len(result['flips'])} by key):")
        for f in result["flips"]:
            keys = " ".join(str(f[k]) for k in STAGES[result["stage"]].keys)
            out.append(f"  {keys}: {_side(f['a'])} -> {_side(f['b'])}  {link_base}{f['view']['b']}")
    p = result.get("problems")
    if p:
        out.append(f"problems: {p['compared']} compared, pass rate changed in {p['pass_rate_changed']}, kept "
                   f"{p['kept_a']} -> {p['kept_b']} ({p['kept_to_dropped']} now dropped, "
                   f"{p['dropped_to_kept']} now kept)")
        for r in p["changed"]:
            out.append(f"  {r['problem_id']}: pass rate {_rate(r['pass_rate_a'])} -> {_rate(r['pass_rate_b'])}, "
                       f"{_keep(r['keep_a'], r['drop_reason_a'])} -> {_keep(r['keep_b'], r['drop_reason_b'])}")
    out.append(f"viewer: {link_base}{diff_link(a['run_id'], b['run_id'], result['stage'], result['teacher'])}")
    return out


def _kappa(k: float | None) -> str:
    return "undefined (one label only)" if k is None else f"{k:.4f}"


def _side(v: dict) -> str:
    return " ".join(f"{k}={v[k]}" for k in v if k not in ("extracted",) and v[k] is not None)


def _rate(r: float | None) -> str:
    return "-" if r is None else f"{r:.3f}"


def _keep(keep: bool | None, why: str | None) -> str:
    return "kept" if keep else f"dropped ({why})" if why else "dropped"
