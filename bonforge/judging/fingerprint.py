"""The judge's fingerprint per domain: what decides a verdict besides the recipe's settings and the
problem's data. It enters every verdict's identity and the verdicts stage key (``stages/verify.py``), so
a changed judge judges again and an unchanged one never does.

* **maths**: the judging sources (``judging/math_rules.py``: extraction, rewrites, the comparison;
  ``judging/math.py``: the killable checker children that run them) and the
  installed versions of math-verify, its LaTeX parser (latex2sympy2_extended, with the ANTLR runtime it
  parses with) and sympy;
* **code**: the judging sources (extraction, comparison, test specs, the verdict) and every source of the
  sandbox package (runner, pool, checker, the image's build recipe: ``sandbox/**/*.py`` and its
  ``Dockerfile``, by glob, so a file added there counts), and the backend that runs programs: ``docker``
  (the image built from those sources; a recipe's own ``image`` tag is in the settings) or ``process``
  (the host's Python runs them: its implementation and version count).

Sources count by their meaning, not their text: each Python file is parsed and its syntax tree, without
docstrings, is written out field by field (comments, blank lines, wrapping, quotes and docstrings change
nothing; a changed line of code, a local patch nobody versioned included, changes the fingerprint). The
tree is written by ``_dump`` rather than ``ast.dump`` (whose text differs between Python versions), and
files are named relative to the package: the same sources give the same fingerprint on every machine.
Computed once per process and domain (0.2 s for both domains, measured on a 2-core machine)."""

from __future__ import annotations

import ast
import functools
import hashlib
import platform
from importlib import metadata
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent  # the bonforge package these sources belong to

SOURCES = {
    "math": ("judging/math.py", "judging/math_rules.py"),
    "code": ("judging/code.py", "judging/compare.py", "judging/extract.py", "judging/passes.py", "judging/spec.py",
             "sandbox/**/*.py", "sandbox/Dockerfile"),
}
LIBRARIES = {
    "math": ("math-verify", "latex2sympy2_extended", "antlr4-python3-runtime", "sympy"),
    "code": (),
}


def _drop_docstring(body: list) -> list:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


def _dump(node) -> str:
    """A syntax tree as text: node types and their non-empty fields, no positions and no docstrings."""
    if isinstance(node, ast.AST):
        parts = []
        for name in node._fields:
            value = getattr(node, name, None)
            if name == "body" and isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                                    ast.AsyncFunctionDef)):
                value = _drop_docstring(value)
            if value is None or value == []:
                continue  # fields newer Pythons add (empty by default) leave the text alone
            parts.append(f"{name}={_dump(value)}")
        return f"{type(node).__name__}({','.join(parts)})"
    if isinstance(node, list):
        return "[" + ",".join(_dump(v) for v in node) + "]"
    return f"{type(node).__name__}:{node!r}"


def normalised(path: Path) -> bytes:
    """What of a source file counts: a Python file's syntax tree without docstrings (``_dump``); another
    file's lines without comments, blank lines and surrounding spaces."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        return _dump(ast.parse(text, filename=path.name)).encode()
    lines = (line.strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("#")).encode()


def source_files(domain: str, package: Path = PACKAGE) -> list[Path]:
    """The files of ``domain``'s judge, sorted by their path in the package."""
    found = {p for pattern in SOURCES[domain] for p in package.glob(pattern) if p.is_file()}
    return sorted(found, key=lambda p: p.relative_to(package).as_posix())


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def parts(domain: str, backend: str | None = None, package: Path = PACKAGE) -> dict[str, str]:
    """What the fingerprint covers, by name: one digest per source file (its path in the package), each
    library's version, and for code the backend (with ``process``, the host's Python)."""
    out = {f"source:{p.relative_to(package).as_posix()}": hashlib.sha256(normalised(p)).hexdigest()
           for p in source_files(domain, package)}
    out |= {f"library:{name}": _version(name) for name in LIBRARIES[domain]}
    if domain == "code":
        out["backend"] = backend or "docker"
        if backend == "process":
            out["python"] = f"{platform.python_implementation()} {platform.python_version()}"
    return out


@functools.cache
def fingerprint(domain: str, backend: str | None = None) -> str:
    """The judge of ``domain`` (``math`` or ``code``; ``backend`` for code) as a hex digest, once per
    process."""
    if domain not in SOURCES:
        raise ValueError(f"no judge for domain {domain!r} (known: {', '.join(sorted(SOURCES))})")
    text = "\n".join(f"{k}={v}" for k, v in sorted(parts(domain, backend).items()))
    return hashlib.sha256(f"{domain}\n{text}".encode()).hexdigest()[:20]
