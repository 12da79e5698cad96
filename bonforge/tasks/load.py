"""Stage `problems`: load a problem set into the PROBLEMS table."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from bonforge import data
from bonforge.config import ProblemsConfig, Recipe
from bonforge.errors import DataError
from bonforge.records import get_field, read_records, require_str
from bonforge.schema import PROBLEMS
from bonforge.stage import Node, Stage

VERSION = "1"


def load_problems(cfg: ProblemsConfig, path: Path) -> pa.Table:
    if cfg.format in ("humaneval", "apps"):
        from bonforge.tasks import load_code

        table = load_code.load_humaneval(path) if cfg.format == "humaneval" else load_code.load_apps(path)
        return table.slice(0, cfg.limit) if cfg.limit else table
    rows: dict[str, list] = {f.name: [] for f in PROBLEMS}
    seen: dict[str, int] = {}
    src = str(path)
    for index, (lineno, rec) in enumerate(read_records(path)):
        if cfg.limit and index >= cfg.limit:
            break
        where = f"line {lineno}"
        fm = cfg.fields
        question = require_str(get_field(rec, fm.question, source=src, record=where), source=src, record=where,
                               field=fm.question)
        answer = None
        if fm.answer:
            answer = require_str(get_field(rec, fm.answer, source=src, record=where), source=src, record=where,
                                 field=fm.answer)
        if fm.id:
            pid = require_str(get_field(rec, fm.id, source=src, record=where), source=src, record=where, field=fm.id)
        else:
            pid = f"{cfg.name}/{index:05d}"
        if pid in seen:
            raise DataError(f"duplicate problem id {pid!r} (first at record {seen[pid]})", src, where, fm.id or "id")
        seen[pid] = lineno
        meta = {k: get_field(rec, k, source=src, record=where, default=None) for k in fm.metadata}
        for name, value in (("problem_id", pid), ("source", cfg.name), ("domain", cfg.domain),
                            ("question", question), ("answer", answer), ("tests", None),
                            ("metadata", json.dumps(meta, ensure_ascii=False, sort_keys=True))):
            rows[name].append(value)
    if not rows["problem_id"]:
        raise DataError("no problems found (empty file?)", src)
    return pa.Table.from_pydict(rows, schema=PROBLEMS)


def _load(_: pa.Table, cfg: ProblemsConfig, recipe_dir: Path) -> pa.Table:
    return load_problems(cfg, data.resolve(cfg.source, recipe_dir))


STAGE = Stage("problems", VERSION, compute=_load, early=True)


def node(recipe: Recipe, recipe_dir: Path) -> Node:
    return STAGE.bind(recipe.problems.key_config(), {}, params={"cfg": recipe.problems, "recipe_dir": recipe_dir})
