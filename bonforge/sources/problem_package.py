"""A competitive-programming problem package in the Library Checker layout, as a problems row and its solutions.

A package folder holds ``task.md`` (the statement), ``info.toml`` (``timelimit`` in seconds, ``[[solutions]]``
with their expected outcomes), ``checker.cpp`` (a testlib checker), ``sol/*`` (solutions) and ``tests/*.in`` /
``tests/*.out`` (inputs and the jury's answers, paired by name). Headers a checker includes in quotes
(``testlib.h``) are taken from the package or from the ``common`` folders given (Library Checker keeps them
in ``common/`` beside the packages) and travel with the checker in the spec. Headers the C++ solutions include
in quotes (``"random.h"`` from ``common/``, ``"../hpp/factor.hpp"`` beside ``sol/``) travel in the spec's
``include``, by their place in the package's tree, so that every C++ program of the problem builds as its
solutions do (``bonforge.judging.spec``).

Solution outcomes, from ``info.toml``: ``pass`` (no entry, or no flags), ``fail`` (``expect = "WA"`` or
``"RE"``, or ``wrong = true``), ``tle`` (``expect = "TLE"``: correct but too slow), ``tle_ok``
(``allow_tle = true``: passes, or runs out of time on some tests). A solution with ``function = true`` is a
function linked with a grader: not a program on its own (``expected`` is ``None``: not judged as one).

A recipe reads a folder of packages (``problems.format: problem_package``: ``load_packages``, the ``common``
folder beside them shared) and their solutions as a pool teacher (``format: problem_package``:
``package_candidates``, labelled ``reference_correct`` true for ``pass``, false for ``fail`` and ``tle``, none
for ``tle_ok``).
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pyarrow as pa

from bonforge.errors import DataError
from bonforge.judging.spec import TestSpec
from bonforge.schema import CANDIDATES, PROBLEMS

_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"/\n]{1,100})"', re.M)
_QUOTED_PATH = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]{1,400})"', re.M)
MAX_INCLUDE_FILES = 200  # headers one package's solutions may bring in
LANGUAGE_OF_SUFFIX = {".cpp": "cpp", ".cc": "cpp", ".java": "java", ".py": "python"}


def _outcome(entry: dict) -> str | None:
    if entry.get("function"):
        return None
    if entry.get("wrong") or entry.get("expect") in ("WA", "RE"):
        return "fail"
    if entry.get("expect") == "TLE":
        return "tle"
    if entry.get("allow_tle"):
        return "tle_ok"
    return "pass"


def _checker(folder: Path, common: list[Path]) -> dict | None:
    path = folder / "checker.cpp"
    if not path.is_file():
        return None
    source = path.read_text()
    files: dict[str, str] = {}
    todo = _QUOTED_INCLUDE.findall(source)
    while todo:
        name = todo.pop()
        if name in files:
            continue
        found = next((d / name for d in [folder, *common] if (d / name).is_file()), None)
        if found is None:
            raise DataError(f"the checker includes {name!r}, found neither in the package nor in "
                            f"{', '.join(map(str, common)) or 'a common folder'}", str(path), folder.name, "checker")
        files[name] = found.read_text()
        todo += _QUOTED_INCLUDE.findall(files[name])
    return {"source": source, "files": files}


def _solution_headers(folder: Path, common: list[Path], sources: list[Path]) -> dict[str, str] | None:
    """The headers the C++ ``sources`` include in quotes, by their path in the package's tree (``common/...`` for
    a common folder's), found as the compiler finds them: beside the including file, then in ``common``. Only
    files inside the package or a common folder are read; one not found is left to the compiler to report."""
    roots = [(folder.resolve(), ""), *((d.resolve(), f"{COMMON}/") for d in common)]
    files: dict[str, str] = {}
    todo = [(path.parent, name) for path in sources for name in _QUOTED_PATH.findall(path.read_text())]
    while todo:
        where, name = todo.pop()
        for base in (where, *(d for d in common)):
            found = (base / name).resolve()
            tree = next((prefix + found.relative_to(root).as_posix() for root, prefix in roots
                         if found.is_relative_to(root) and found != root), None)  # fmt: skip
            if tree is None or not found.is_file():
                continue
            if tree not in files:
                if len(files) >= MAX_INCLUDE_FILES:
                    raise DataError(f"the solutions include over {MAX_INCLUDE_FILES} headers", str(folder),
                                    folder.name, "sol")  # fmt: skip
                files[tree] = found.read_text()
                todo += [(found.parent, n) for n in _QUOTED_PATH.findall(files[tree])]
            break
    return files or None


def load_package(folder: str | Path, common: list[str | Path] = ()) -> tuple[dict, list[dict]]:
    """(a ``problems`` row, the package's solutions ``{name, language, text, expected}``)."""
    folder = Path(folder)
    common_dirs = [Path(c) for c in common]
    info_path = folder / "info.toml"
    try:
        info = tomllib.loads(info_path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise DataError(f"cannot read it ({e})", str(info_path), folder.name, "info.toml") from None
    limit = info.get("timelimit")
    if not (isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit > 0):
        raise DataError(f"'timelimit' must be a positive number of seconds, got {limit!r:.50}", str(info_path),
                        folder.name, "timelimit")  # fmt: skip
    inputs = sorted((folder / "tests").glob("*.in"))
    if not inputs:
        raise DataError("no tests (tests/*.in)", str(folder / "tests"), folder.name, "tests")
    outputs = [p.with_suffix(".out") for p in inputs]
    missing = [p.name for p in outputs if not p.is_file()]
    if missing:
        raise DataError(f"inputs without an answer: {', '.join(missing[:5])}", str(folder / "tests"), folder.name,
                        "tests")  # fmt: skip
    cpp = [p for p in sorted((folder / "sol").glob("*")) if LANGUAGE_OF_SUFFIX.get(p.suffix) == "cpp" and p.is_file()]
    spec = TestSpec("stdio", [p.read_text() for p in inputs], [p.read_text() for p in outputs],
                    time_limit_s=float(limit), checker=_checker(folder, common_dirs),
                    include=_solution_headers(folder, common_dirs, cpp))  # fmt: skip
    statement = folder / "task.md"
    row = {"problem_id": folder.name, "source": "problem-package", "domain": "code",
           "question": statement.read_text() if statement.is_file() else None, "answer": None,
           "tests": spec.to_json(),
           "metadata": json.dumps({"title": info.get("title"), "tests": [p.stem for p in inputs]})}  # fmt: skip
    entries = {e.get("name"): e for e in info.get("solutions", []) if isinstance(e, dict)}
    solutions = []
    for path in sorted((folder / "sol").glob("*")):
        language = LANGUAGE_OF_SUFFIX.get(path.suffix)
        if language is None or not path.is_file():
            continue
        solutions.append({"name": path.name, "language": language, "text": path.read_text(),
                          "expected": _outcome(entries.get(path.name, {}))})  # fmt: skip
    return row, solutions


LABEL_OF_OUTCOME = {"pass": True, "fail": False, "tle": False, "tle_ok": None}
COMMON = "common"  # the folder beside the packages with the headers their checkers share (Library Checker's)


def package_folders(path: str | Path, glob: str | None = None) -> list[Path]:
    """The packages under ``path`` (folders holding ``info.toml``, matched by ``glob``), or ``path`` itself."""
    path = Path(path)
    if (path / "info.toml").is_file():
        return [path]
    found = sorted(p for p in path.glob(glob or "*") if (p / "info.toml").is_file())
    if not found:
        raise DataError(f"no problem package (a folder with info.toml) matches {glob or '*'!r}", str(path))
    return found


def _common(folder: Path) -> list[Path]:
    return [d for d in (folder.parent / COMMON, folder / COMMON) if d.is_dir()]


def read_beside(path: str | Path) -> list[Path]:
    """What a load of ``path`` reads outside it, for its content key: one package's ``../common`` (the headers
    its checker includes); a folder of packages holds its ``common`` itself."""
    path = Path(path)
    return [path.parent / COMMON] if (path / "info.toml").is_file() and (path.parent / COMMON).is_dir() else []


def load_packages(path: str | Path, name: str, glob: str | None = None, limit: int | None = None) -> pa.Table:
    """A PROBLEMS table of the packages under ``path`` (``source`` = ``name``, ``problem_id`` = the folder's)."""
    rows = [dict(load_package(f, _common(f))[0], source=name) for f in package_folders(path, glob)[:limit]]
    return pa.Table.from_pylist(rows, schema=PROBLEMS)


def package_candidates(path: str | Path, problems: pa.Table, teacher: str) -> pa.Table:
    """The solutions of the packages under ``path`` whose problems are in ``problems``, as candidates of
    ``teacher`` with their language and info.toml's label (function-style solutions left out; sample ``i`` is
    the i-th of the others in file-name order)."""
    wanted = set(problems.column("problem_id").to_pylist())
    rows = []
    for folder in package_folders(path):
        if folder.name not in wanted:
            continue
        sols = [s for s in load_package(folder, _common(folder))[1] if s["expected"] is not None]
        rows += [{"candidate_id": f"{folder.name}/{teacher}/{i}", "problem_id": folder.name,
                  "teacher": teacher, "sample_index": i, "text": s["text"], "language": s["language"],
                  "reference_correct": LABEL_OF_OUTCOME[s["expected"]]} for i, s in enumerate(sols)]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=CANDIDATES)
