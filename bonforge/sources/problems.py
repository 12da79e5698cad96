"""Problem sets: a JSONL or Parquet file, a directory of shards or a local Hugging Face dataset, mapped by
``fields`` into PROBLEMS rows; code problems take their tests from ``fields.tests`` (see
``sources.code.record_tests``). Every value is untrusted: a malformed one stops the load with a ``DataError``
naming the file, the record and the field.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from bonforge.config import ProblemsConfig
from bonforge.errors import DataError
from bonforge.tables.records import dataset_files, get_field, missing_value, read_records, require_str
from bonforge.schema import PROBLEMS

LEFT_OUT_NO_ANSWER = "left_out_no_gold_answer"  # the table's schema metadata: problems left out (missing_answers: skip)


def records(cfg: ProblemsConfig, path: Path) -> Iterator[tuple[str, str, dict]]:
    """``(file, record label, record)`` of a source, at most ``cfg.limit`` of them."""

    def every() -> Iterator[tuple[str, str, dict]]:
        for file in dataset_files(path, cfg.files, cfg.split):
            label = "row" if file.suffix in (".parquet", ".arrow") else "line"
            for n, rec in read_records(file, cfg.source.byte_limits()):
                yield str(file), f"{label} {n}", rec

    return itertools.islice(every(), cfg.limit)


def load_problems(cfg: ProblemsConfig, path: Path, drop: pa.Table | None = None) -> pa.Table:
    """All problems of the source, less the ``problem_id`` values in ``drop`` (a contamination table)."""
    if cfg.format == "problem_package":
        from bonforge.sources.problem_package import load_packages

        table = load_packages(path, cfg.name, cfg.files, cfg.limit)
    elif cfg.format in ("humaneval", "apps"):
        from bonforge.sources import code as load_code

        if cfg.format == "humaneval":
            table = load_code.load_humaneval(path, cfg.source.byte_limits())
        else:
            table = load_code.load_apps(path)
        table = table.slice(0, cfg.limit) if cfg.limit else table
    else:
        table = _load_table(cfg, path)
    if drop is not None and drop.num_rows:
        table = table.filter(pc.invert(pc.is_in(table.column("problem_id"), drop.column("problem_id"))))
    return table


def _load_table(cfg: ProblemsConfig, path: Path) -> pa.Table:
    rows: dict[str, list] = {f.name: [] for f in PROBLEMS}
    seen: dict[str, str] = {}
    fm = cfg.fields
    left_out = 0
    for index, (src, where, rec) in enumerate(records(cfg, path)):
        question = require_str(get_field(rec, fm.question, source=src, record=where), source=src, record=where,
                               field=fm.question)
        answer = None
        if fm.answer:  # optional for code problems (their reference solutions may come from fields.solutions)
            optional = fm.tests or cfg.domain == "open"  # an open-ended problem's reference is optional
            answer = get_field(rec, fm.answer, source=src, record=where, **({"default": None} if optional else {}))
            if cfg.domain == "math" and (why := missing_value(answer)) is not None:
                if cfg.missing_answers == "error":
                    raise DataError(f"no gold answer: {why}; fix the record, or set problems.missing_answers: skip "
                                    "to leave such problems out", src, where, fm.answer)  # fmt: skip
                left_out += 1
                continue
            if answer is not None:
                answer = require_str(answer, source=src, record=where, field=fm.answer)
        if fm.id:
            pid = require_str(get_field(rec, fm.id, source=src, record=where), source=src, record=where, field=fm.id)
        else:
            pid = f"{cfg.name}/{index:05d}"
        if pid in seen:
            raise DataError(f"duplicate problem id {pid!r} (first at record {seen[pid]})", src, where, fm.id or "id")
        seen[pid] = where.split()[-1]
        meta = {k: get_field(rec, k, source=src, record=where, default=None) for k in fm.metadata}
        if fm.language:
            lang = get_field(rec, fm.language, source=src, record=where, default=None)
            meta["language"] = None if lang is None else require_str(lang, source=src, record=where,
                                                                     field=fm.language).strip().lower()
        tests = None
        if fm.tests:
            from bonforge.sources.code import record_tests
            from bonforge.sources.spec_formats import Where

            spec, extra = record_tests(rec, fm, Where(src, f"{where} ({pid})"))
            tests, question = spec.to_json(), question + (f"\n\n{spec.starter}" if spec.starter else "")
            meta.update(extra)
            answer = extra["reference_solutions"][0] if extra.get("reference_solutions") else answer
        try:
            metadata = json.dumps(meta, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError) as e:  # bytes, dates, keys of mixed types (from Parquet)
            raise DataError(f"a value JSON cannot hold ({e})", src, where, ", ".join(fm.metadata)) from None
        for name, value in (("problem_id", pid), ("source", cfg.name), ("domain", cfg.domain),
                            ("question", question), ("answer", answer), ("tests", tests), ("metadata", metadata)):
            rows[name].append(value)
    if not rows["problem_id"]:
        why = f" ({left_out} left out for a missing gold answer)" if left_out else " (empty file?)"
        raise DataError(f"no problems found{why}", str(path))
    table = pa.Table.from_pydict(rows, schema=PROBLEMS)
    return table.replace_schema_metadata({LEFT_OUT_NO_ANSWER: str(left_out)}) if left_out else table
