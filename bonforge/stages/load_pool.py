"""Candidates someone already generated: the `pool` teachers (with published labels if any) and the
problems' reference solutions (``include_reference``), each a ``candidates`` stage."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from bonforge import identity
from bonforge.sources import data
from bonforge.config import PoolTeacher
from bonforge.errors import DataError
from bonforge.tables import trajectories
from bonforge.tables.records import get_field, read_records, require_str
from bonforge.schema import CANDIDATES, REFERENCE_TEACHER, conform, text_chars
from bonforge.stage import Node, Params, Ref, Stage, unkeyed
from bonforge.sources import code as load_code
from bonforge.sources.spec_formats import Where


_ABSENT = object()


def _languages(rec: dict, teacher: PoolTeacher, n: int, src: str, where: str) -> list:
    """The language of each of a record's ``n`` samples (``teacher.language``: one value, or a list beside them)."""
    if not teacher.language:
        return [None] * n
    value = get_field(rec, teacher.language, source=src, record=where, default=None)  # none: the fence's tag
    if not isinstance(value, list):
        return [load_code.program_language(value, Where(src, where), teacher.language)] * n
    if len(value) != n:
        raise DataError(f"{len(value)} languages for {n} samples ({teacher.samples})", src, where, teacher.language)
    return [load_code.program_language(v, Where(src, where), f"{teacher.language}[{i}]") for i, v in enumerate(value)]


def _trajectory_label(rec: dict, teacher: PoolTeacher, i: int, n: int, src: str, where: str) -> bool | None:
    """A trajectory's published label: the record's ``label`` field, one value for all its trajectories or a
    list beside them (a trajectory is a list of messages: it has no fields of its own)."""
    value = get_field(rec, teacher.label, source=src, record=where, default=None)
    field = teacher.label
    if isinstance(value, list):
        if len(value) != n:
            raise DataError(f"{len(value)} labels for {n} trajectories ({teacher.samples})", src, where, field)
        value, field = value[i], f"{field}[{i}]"
    if value is not None and not isinstance(value, bool):
        raise DataError(f"label must be true/false, got {value!r}", src, where, field)
    return value


def _one_trajectory(value) -> bool:
    """Whether a ``messages`` pool record's samples field holds one trajectory (a list of message objects)
    rather than a list of them."""
    return isinstance(value, list) and bool(value) and isinstance(value[0], dict)


def _norm(text: str) -> str:
    return " ".join(text.split())


def import_pool(teacher: PoolTeacher, path: Path, problems: pa.Table) -> pa.Table:
    """Candidates of one teacher from a pool file, matched to ``problems``."""
    if teacher.format not in ("jsonl", "messages"):
        if teacher.format == "problem_package":
            from bonforge.sources.problem_package import package_candidates

            return package_candidates(path, problems, teacher.name)
        if teacher.format == "codet":
            table = load_code.import_codet_pool(path, problems, n=teacher.n or 8, teacher=teacher.name,
                                               limits=teacher.source.byte_limits())
        else:
            table = load_code.import_apps_pool(path, problems, teacher=teacher.name)
        return conform(table, CANDIDATES)

    ids = problems.column("problem_id").to_pylist()
    if teacher.match == "question":
        index = {_norm(q): pid for q, pid in zip(problems.column("question").to_pylist(), ids)}
    else:
        index = {pid: pid for pid in ids}
    src = str(path)
    rows: dict[str, list] = {f.name: [] for f in CANDIDATES}
    matched = 0
    first = None  # the first record's match value, for the error when none matches
    taken: dict[str, int] = {}  # samples per problem so far: a problem's samples may come in several records
    for order, (lineno, rec) in enumerate(read_records(path, teacher.source.byte_limits())):
        where = f"line {lineno}"
        if teacher.match == "order":
            if order >= len(ids):
                break
            pid = ids[order]
        else:
            key = require_str(get_field(rec, teacher.match_field, source=src, record=where), source=src,
                              record=where, field=teacher.match_field)
            first = key if first is None else first
            pid = index.get(_norm(key) if teacher.match == "question" else key)
            if pid is None:
                continue  # a pool may cover more problems than the recipe loads
        matched += 1
        samples = get_field(rec, teacher.samples, source=src, record=where)
        if teacher.format == "messages" and _one_trajectory(samples) or not isinstance(samples, list):
            samples = [samples]
        languages = _languages(rec, teacher, len(samples), src, where)
        start = taken.get(pid, 0)
        keep = samples if teacher.n is None else samples[: max(0, teacher.n - start)]
        taken[pid] = start + len(keep)
        for i, sample in enumerate(keep):
            if languages[i] is load_code.UNRUNNABLE:
                continue
            field = f"{teacher.samples}[{i}]"
            messages = None
            if teacher.format == "messages":
                try:
                    trajectories.check(sample)
                except trajectories.Malformed as e:
                    raise DataError(f"not a trajectory: {e.message}", src, where, field + e.field) from None
                text, messages = trajectories.answer(sample), trajectories.dumps(sample)
            elif teacher.text:
                if not isinstance(sample, dict):
                    raise DataError(f"expected an object with {teacher.text!r}", src, where, field)
                field += f".{teacher.text}"
                text = get_field(sample, teacher.text, default=_ABSENT)
                if text is _ABSENT:
                    raise DataError(f"missing field (sample has: {', '.join(sorted(sample))})", src, where, field)
            else:
                text = sample
            text = require_str(text, source=src, record=where, field=field, allow_empty=True)
            label = teacher.reference_correct
            if teacher.label and teacher.format == "messages":
                label = _trajectory_label(rec, teacher, i, len(samples), src, where)
            elif teacher.label:
                label = get_field(sample, teacher.label, source=src, record=where, default=None)
                if label is not None and not isinstance(label, bool):
                    raise DataError(f"label must be true/false, got {label!r}", src, where,
                                    f"{teacher.samples}[{i}].{teacher.label}")
            number = start + i  # a problem's samples are numbered in file order, across its records
            for name, value in (("candidate_id", f"{pid}/{teacher.name}/{number}"), ("problem_id", pid),
                                ("teacher", teacher.name), ("sample_index", number), ("text", text),
                                ("reference_correct", label), ("language", languages[i]), ("messages", messages)):
                rows[name].append(value)
    if matched == 0:
        seen = "" if first is None else f"; the first record's is {first[:80]!r}"
        like = (f", problem ids are like {ids[0]!r} (problems.fields.id names them)" if teacher.match == "id" and ids
                else "")
        raise DataError(f"no pool record matched any of the {len(ids)} problems by {teacher.match} (the records' "
                        f"field {teacher.match_field!r}{seen}){like}", src)
    n = len(rows["candidate_id"])
    for name in ("reasoning", "finish_reason", "prompt_tokens", "completion_tokens", "seed", "text_digest", "cost_usd",
                 "engine_s"):
        rows[name] = [None] * n
    return pa.Table.from_pydict(rows, schema=CANDIDATES)


def _import(_: pa.Table, problems: pa.Table, teacher: PoolTeacher, recipe_dir: Path, content: dict) -> pa.Table:
    table = import_pool(teacher, data.resolve(teacher.source, recipe_dir), problems)
    data.unchanged(teacher.source, recipe_dir, content)
    return identity.with_digests(table)


def _reference(_: pa.Table, problems: pa.Table) -> pa.Table:
    return identity.with_digests(conform(load_code.reference_candidates(problems), CANDIDATES))


@dataclass(frozen=True)
class PoolParams(Params):
    teacher: PoolTeacher
    recipe_dir: Path = unkeyed()
    content: dict = unkeyed()  # the pool file's content key (``data.content_key``), in the key in place of its path

    def key_config(self) -> dict:
        return data.keyed(self.teacher, self.content)


_PROBLEMS = dict(context=lambda i: {"problems": i.read("problems")}, early=True,
                 summary=lambda w: {"text_chars": text_chars(w.each(["text"]))})
# (The ``language`` column, whole-pool labels and problem packages came with recipe fields that are keyless at
# their defaults: a pool written before them keeps its key; its missing column reads as null.)
# 3: keyed by the pool file's content (a digest cached by stat), not its path: a pool edited in place is new.
# 2: the text_digest column (each text hashed once, here, for verification's row identity)
# 4: a problem's samples from several records (one record per sample) are numbered on (they all had index 0)
POOL = Stage("candidates", "pool-4", params=PoolParams, schema=CANDIDATES, compute=_import, **_PROBLEMS)
REFERENCE = Stage("candidates", "reference-2", schema=CANDIDATES, compute=_reference, **_PROBLEMS)


def node(recipe_dir: Path, problems: Ref, teacher: PoolTeacher) -> Node:
    content = data.content_key(teacher.source, recipe_dir)
    return POOL.bind(PoolParams(teacher, recipe_dir, content), {"problems": problems},
                     label=f"candidates[{teacher.name}]", note={"teacher": teacher.name})


def reference_node(problems: Ref) -> Node:
    """The problems' reference solutions as a teacher named ``reference``."""
    return REFERENCE.bind({"teacher": REFERENCE_TEACHER}, {"problems": problems},
                          label=f"candidates[{REFERENCE_TEACHER}]", note={"teacher": REFERENCE_TEACHER})
