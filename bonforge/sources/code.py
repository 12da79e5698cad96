"""Loaders of code problems (``PROBLEMS`` tables) and importers of existing candidate pools
(``CANDIDATES`` tables). Paths are local files; the data layer resolves URLs and mirrors.

* Any table (JSONL, Parquet, a local HF dataset): ``record_tests`` turns the fields a recipe's
  ``fields`` names (tests in any shape of ``test_formats``, function name, entry point, starter code,
  time and memory limits, reference solutions) into the spec and metadata of one problem.

* HumanEval (``HumanEval.jsonl.gz``): ``problem_id`` = task_id, question = prompt, answer =
  canonical_solution (the body the prompt continues with), tests = an ``assert`` spec running the
  file's ``check(candidate)`` on the entry point.
* APPS (a directory of ``<id>/`` folders, CodeRL layout): ``problem_id`` = ``apps/<id>``, question =
  ``question.txt``, tests = ``stdio`` or, with ``fn_name``, ``call`` (starter code kept in the spec and the
  APPS harness's import header as prelude; time limit 4 s per test as in that harness), answer = the
  first of ``solutions.json``, all of them in metadata ``reference_solutions``.
* The CodeT CodeGen-16B pool: records ``{prompt, samples}`` matched to HumanEval problems by the
  function the prompt ends with and, when names repeat, by prompt text (CodeT removed the ``>>>`` examples).
* The APPS ``gen_solutions.json`` pools: ``reference_correct`` = (``result`` is ``True``).
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path

import pyarrow as pa

from bonforge.config import FieldMap
from bonforge.errors import DataError
from bonforge.tables.records import ByteLimits, get_field, json_error, load_json, read_records
from bonforge.judging.spec import TestSpec
from bonforge.schema import CANDIDATES, PROBLEMS
from bonforge.sources.spec_formats import Where, memory_limit_mb, time_limit_s, to_spec

APPS_TIME_LIMIT_S = 4.0
_REQUIRED = object()
UNRUNNABLE = object()  # a program in a language the sandbox does not run (left out where programs are read)
# CodeContests' language codes (its ``solutions.language``): 0 unknown, 1 Python 2, 2 C++, 3 Python 3, 4 Java
CODECONTESTS_LANGUAGES = {0: UNRUNNABLE, 1: UNRUNNABLE, 2: "cpp", 3: "python", 4: "java"}


def program_language(value, where: Where, field: str):
    """A program's language as a record gives it: a name as is (lower case; one the sandbox does not know is
    the candidate's compile_error, said in its detail), a CodeContests code mapped (``UNRUNNABLE`` for
    Python 2 and unknown), null as null."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip().lower() or None
    if isinstance(value, int) and not isinstance(value, bool) and value in CODECONTESTS_LANGUAGES:
        return CODECONTESTS_LANGUAGES[value]
    raise where.error(f"expected a language name or a CodeContests language code (0-4), got {value!r:.40}", field)


def field_value(rec: dict, dotted: str, where: Where, default=_REQUIRED):
    """A record's field (see ``records.get_field``), errors naming ``where``."""
    kw = {} if default is _REQUIRED else {"default": default}
    return get_field(rec, dotted, source=where.source, record=where.record, **kw)


def record_tests(rec: dict, fm: FieldMap, where: Where) -> tuple[TestSpec, dict]:
    """The test spec of one code record (with the record's time and memory limits) and the metadata it adds
    (memory limit, reference solutions)."""
    names = [fm.tests] if isinstance(fm.tests, str) else list(fm.tests or [])

    def text(name: str | None) -> str | None:
        value = field_value(rec, name, where, None) if name else None
        if value is not None and not isinstance(value, str):
            raise where.error(f"expected a string, got {type(value).__name__}", name)
        return value

    limit = time_limit_s(field_value(rec, fm.time_limit, where, None), where, fm.time_limit) if fm.time_limit else None
    mb = memory_limit_mb(field_value(rec, fm.memory_limit, where, None), where, fm.memory_limit) if fm.memory_limit \
        else None
    spec = to_spec({n: field_value(rec, n, where) for n in names}, fm.tests_format, where, fn_name=text(fm.fn_name),
                   entry_point=text(fm.entry_point), starter=text(fm.starter) or "", time_limit_s=limit,
                   memory_mb=mb)  # fmt: skip
    try:
        spec.to_json()
    except (TypeError, ValueError) as e:  # bytes or dates among the inputs (from Parquet)
        raise where.error(f"the tests hold a value JSON cannot ({e})", ", ".join(names)) from None
    meta = {"memory_limit_mb": mb} if mb else {}  # also in the spec: the judge and the RL rows apply it
    if fm.solutions:
        sols = field_value(rec, fm.solutions, where)
        if isinstance(sols, str):
            try:
                sols = load_json(sols)
            except ValueError as e:
                raise where.error(f"expected a list of programs or its JSON string ({json_error(e)})",
                                  fm.solutions) from None
        if not isinstance(sols, list) or not all(isinstance(s, str) for s in sols):
            raise where.error("expected a list of programs (strings)", fm.solutions)
        if fm.solution_languages:
            langs = field_value(rec, fm.solution_languages, where)
            if not isinstance(langs, list) or len(langs) != len(sols):
                raise where.error(f"expected a list of {len(sols)} languages, one per solution",
                                  fm.solution_languages)  # fmt: skip
            langs = [program_language(v, where, f"{fm.solution_languages}[{i}]") for i, v in enumerate(langs)]
            keep = [k for k, v in enumerate(langs) if v is not UNRUNNABLE]
            sols, meta["reference_languages"] = [sols[k] for k in keep], [langs[k] for k in keep]
        meta["reference_solutions"] = list(sols)
    return spec, meta


def _need(rec: dict, key: str, path: Path, record, kind: type = str) -> object:
    if key not in rec:
        raise DataError("missing", str(path), record, key)
    if not isinstance(rec[key], kind):
        raise DataError(f"expected a {kind.__name__}, got {type(rec[key]).__name__}", str(path), record, key)
    return rec[key]


def load_humaneval(path: str | Path, limits: ByteLimits | None = None) -> pa.Table:
    path = Path(path)
    rows = []
    for n, rec in read_records(path, limits):
        task_id = _need(rec, "task_id", path, f"line {n}")
        entry = _need(rec, "entry_point", path, task_id)
        if not entry.isidentifier():
            raise DataError(f"expected a Python identifier, got {entry!r:.100}", str(path), task_id, "entry_point")
        check = f"{_need(rec, 'test', path, task_id)}\n\ncheck({entry})\n"
        prompt = _need(rec, "prompt", path, task_id)
        rows.append({
            "problem_id": task_id, "source": "humaneval", "domain": "code",
            "question": prompt, "answer": _need(rec, "canonical_solution", path, task_id),
            "tests": TestSpec("assert", [None], [None], entry_point=entry, check=check, context=prompt).to_json(),
            "metadata": json.dumps({"entry_point": entry}),
        })  # fmt: skip
    return pa.Table.from_pylist(rows, schema=PROBLEMS)


def _text_file(path: Path, pid: str) -> str:
    """A file of an APPS folder as UTF-8 text; unreadable or not UTF-8 is the problem's error."""
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as e:
        raise DataError(f"cannot read ({e.strerror or e})", str(path), pid, path.stem) from None
    except UnicodeDecodeError as e:
        raise DataError(f"invalid UTF-8 at byte {e.start}", str(path), pid, path.stem) from None


def _json_file(path: Path, pid: str, kind: type, shape: str):
    """A JSON file of an APPS folder, of type ``kind``; anything else names the file and the problem."""
    try:
        doc = load_json(_text_file(path, pid))
    except ValueError as e:
        raise DataError(json_error(e), str(path), pid, path.stem) from None
    if not isinstance(doc, kind):
        raise DataError(f"expected {shape}, got {type(doc).__name__}", str(path), pid, path.stem)
    return doc


def load_apps(directory: str | Path) -> pa.Table:
    directory = Path(directory)
    rows = []
    for d in sorted(p for p in directory.iterdir() if (p / "input_output.json").is_file()):
        pid = f"apps/{d.name}"
        io_path = d / "input_output.json"
        io = _json_file(io_path, pid, dict, "an object with inputs and outputs")
        starter = _text_file(d / "starter_code.py", pid) if (d / "starter_code.py").is_file() else ""
        spec = to_spec({"input_output": io}, "apps", Where(str(io_path), pid), starter=starter,
                       time_limit_s=APPS_TIME_LIMIT_S)  # fmt: skip
        solutions = []
        if (d / "solutions.json").is_file():
            solutions = _json_file(d / "solutions.json", pid, list, "a list of programs")
            if not all(isinstance(sol, str) for sol in solutions):
                raise DataError("expected a list of programs (strings)", str(d / "solutions.json"), pid, "solutions")
        meta = _json_file(d / "metadata.json", pid, dict, "an object") if (d / "metadata.json").is_file() else {}
        meta["reference_solutions"] = solutions
        question = _text_file(d / "question.txt", pid)
        rows.append({
            "problem_id": pid, "source": "apps", "domain": "code",
            "question": question + (f"\n\n{starter}" if starter else ""),
            "answer": solutions[0] if solutions else None, "tests": spec.to_json(), "metadata": json.dumps(meta),
        })  # fmt: skip
    if not rows:
        raise DataError("no APPS problem folders (<id>/input_output.json) found", str(directory))
    return pa.Table.from_pylist(rows, schema=PROBLEMS)


def _candidate(pid: str, teacher: str, i: int, text: str, correct: bool | None = None) -> dict:
    return {"candidate_id": f"{pid}/{teacher}/{i}", "problem_id": pid, "teacher": teacher, "sample_index": i,
            "text": text, "reference_correct": correct}  # fmt: skip


_DEF = re.compile(r"^def\s+(\w+)\s*\(", re.M)


def import_codet_pool(path: str | Path, problems: pa.Table, n: int = 8, teacher: str = "codegen16b",
                      limits: ByteLimits | None = None) -> pa.Table:  # fmt: skip
    """The first ``n`` samples of each CodeT record whose problem is in ``problems``."""
    path = Path(path)
    if n <= 0:
        raise DataError(f"n must be positive, got {n}", str(path))
    by_entry: dict[str, list[dict]] = {}
    for p in problems.select(["problem_id", "question", "metadata"]).to_pylist():
        entry = json.loads(p["metadata"] or "{}").get("entry_point")
        if entry:
            by_entry.setdefault(entry, []).append(p)
    rows, seen = [], {}
    for n_rec, rec in read_records(path, limits):
        prompt = _need(rec, "prompt", path, n_rec)
        defs = _DEF.findall(prompt)
        matches = by_entry.get(defs[-1], []) if defs else []
        if not matches:
            continue
        best = max(matches, key=lambda p: difflib.SequenceMatcher(None, p["question"], prompt).ratio())
        pid = best["problem_id"]
        if pid in seen:
            raise DataError(f"matches problem {pid} as record {seen[pid]} did", str(path), n_rec, "prompt")
        seen[pid] = n_rec
        samples = _need(rec, "samples", path, n_rec, list)
        if not all(isinstance(sample, str) for sample in samples[:n]):
            raise DataError("expected a list of programs (strings)", str(path), n_rec, "samples")
        rows += [_candidate(pid, teacher, i, s) for i, s in enumerate(samples[:n])]
    return pa.Table.from_pylist(rows, schema=CANDIDATES)


def import_apps_pool(directory: str | Path, problems: pa.Table, teacher: str = "coderl") -> pa.Table:
    """``<id>/gen_solutions.json`` of every APPS problem in ``problems``, with their published labels."""
    directory = Path(directory)
    rows = []
    for pid in problems.column("problem_id").to_pylist():
        if not pid.startswith("apps/"):
            continue
        path = directory / pid.removeprefix("apps/") / "gen_solutions.json"
        if not path.is_file():
            continue
        for i, rec in enumerate(_json_file(path, pid, list, "a list of {code, result} objects")):
            if not isinstance(rec, dict):
                raise DataError(f"expected a {{code, result}} object, got {type(rec).__name__}", str(path), pid,
                                f"[{i}]")  # fmt: skip
            rows.append(_candidate(pid, teacher, i, _need(rec, "code", path, f"{pid}[{i}]"),
                                   _need(rec, "result", path, f"{pid}[{i}]", object) is True))  # fmt: skip
    return pa.Table.from_pylist(rows, schema=CANDIDATES)


def reference_candidates(problems: pa.Table, teacher: str = "reference") -> pa.Table:
    """The problems' reference solutions as candidates (metadata ``reference_solutions`` when present, with
    their ``reference_languages`` where recorded, else ``answer``), for ``include_reference``."""
    rows = []
    for p in problems.select(["problem_id", "answer", "metadata"]).to_pylist():
        meta = json.loads(p["metadata"] or "{}")
        refs = meta.get("reference_solutions")
        if refs is None:
            refs = [p["answer"]] if p["answer"] is not None else []
        langs = meta.get("reference_languages") or [None] * len(refs)
        rows += [dict(_candidate(p["problem_id"], teacher, i, text), language=lang)
                 for i, (text, lang) in enumerate(zip(refs, langs, strict=True))]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=CANDIDATES)
