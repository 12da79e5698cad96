"""The judge's fingerprint per domain: what decides a verdict besides the recipe's settings and the
problem's data. It enters every verdict's identity and the verdicts stage key (``stages/verify.py``), so
a changed judge judges again and an unchanged one never does.

* **maths**: the judging sources (``judging/math_rules.py``: extraction, rewrites, the comparison;
  ``judging/extract.py``: where a code block the text ends inside begins;
  ``judging/math.py``: the killable checker children that run them) and the
  installed versions of math-verify, its LaTeX parser (latex2sympy2_extended, with the ANTLR runtime it
  parses with) and sympy;
* **code**: the judging sources (extraction, comparison, test specs, the verdict) and every source of the
  sandbox package (runner, pool, checker, the image's build recipe: ``sandbox/**/*.py`` and its
  ``Dockerfile``, by glob, so a file added there counts), the backend that runs programs, and the toolchains
  that build and run them (``TOOLCHAINS``: g++, javac and java, PyPy, Python, each as its ``--version``
  says, Debian's revision included): for ``docker`` asked inside the image (once per image id and process:
  an image rebuilt under the same tag with newer compilers judges again), for ``process`` on the host, with
  the host's Python. Versions rather than the image's id: an image built on another machine from the same
  packages has another id but judges alike, so keys stay the same across machines (the golden keys).

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
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent  # the bonforge package these sources belong to

SOURCES = {
    "math": ("judging/math.py", "judging/math_rules.py", "judging/extract.py"),
    "code": ("judging/code*.py", "judging/compare.py", "judging/extract.py", "judging/passes.py", "judging/spec.py",
             "sandbox/**/*.py", "sandbox/Dockerfile"),
}
LIBRARIES = {
    "math": ("math-verify", "latex2sympy2_extended", "antlr4-python3-runtime", "sympy"),
    "code": (),
}


# What each toolchain says of its version (the first lines of its stdout and stderr; a missing one: "absent"), in
# the image and on a host; Python: the image's (a host runs programs with its own interpreter, ``python``).
TOOLCHAINS = {"g++": ("g++ --version", 1), "javac": ("javac -version", 1), "java": ("java -version", 3),
              "pypy3": ("pypy3 --version", 2)}
IMAGE_TOOLCHAINS = {**TOOLCHAINS, "python3": ("python3 --version", 1)}


def _script(toolchains: dict[str, tuple[str, int]]) -> str:
    return "; ".join(f"echo '== {name}'; {cmd} 2>&1 | head -n {lines}" for name, (cmd, lines) in toolchains.items())


def _versions(text: str) -> dict[str, str]:
    """``toolchain:<name>`` -> its version text, from ``_SCRIPT``'s output."""
    out, name = {}, None
    for line in text.splitlines():
        if line.startswith("== ") and line[3:] in IMAGE_TOOLCHAINS:
            name = line[3:]
            out[f"toolchain:{name}"] = ""
        elif name and line.strip():
            out[f"toolchain:{name}"] = (out[f"toolchain:{name}"] + " " + line.strip()).strip()
    return {k: ("absent" if not v or "not found" in v else v) for k, v in out.items()}


def host_toolchains() -> dict[str, str]:
    """The host's toolchains (backend ``process``: programs are built and run by them)."""
    try:
        done = subprocess.run(["/bin/sh", "-c", _script(TOOLCHAINS)], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"cannot ask the host's toolchains for their versions: {e}") from None
    return _versions(done.stdout)


@functools.cache
def _image_toolchains(image_id: str) -> tuple[tuple[str, str], ...]:
    from bonforge.sandbox import image

    try:
        logs = image.client().containers.run(image_id, ["sh", "-c", _script(IMAGE_TOOLCHAINS)], remove=True,
                                             network_disabled=True,
                                             labels=image.labels(), stderr=True)  # fmt: skip
    except image.engine_errors() as e:
        raise image.engine_error(f"asking image {image_id[:19]} for its toolchains", e) from None
    return tuple(sorted(_versions(logs.decode("utf-8", "replace")).items()))


def image_toolchains(tag: str | None, build: bool = True) -> dict[str, str]:
    """The toolchains of the sandbox image ``tag`` (the runner's own when None; built when missing if
    ``build``), asked once per image id and process."""
    from bonforge.sandbox import image

    return dict(_image_toolchains(image.image_id(image.ensure_image(tag, build))))


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


def parts(domain: str, backend: str | None = None, package: Path = PACKAGE, image: str | None = None,
          build: bool = True) -> dict[str, str]:
    """What the fingerprint covers, by name: one digest per source file (its path in the package), each
    library's version, and for code the backend and its toolchains (with ``process``, the host's and its
    Python; with ``docker``, those of the image ``image``, built when missing if ``build``)."""
    out = {f"source:{p.relative_to(package).as_posix()}": hashlib.sha256(normalised(p)).hexdigest()
           for p in source_files(domain, package)}
    out |= {f"library:{name}": _version(name) for name in LIBRARIES[domain]}
    if domain == "code":
        out["backend"] = backend or "docker"
        if backend == "process":
            out["python"] = f"{platform.python_implementation()} {platform.python_version()}"
            out |= host_toolchains()
        else:
            out |= image_toolchains(image, build)
    return out


@functools.cache
def fingerprint(domain: str, backend: str | None = None, image: str | None = None, build: bool = True) -> str:
    """The judge of ``domain`` (``math`` or ``code``; ``backend``, ``image`` and ``build``: the code
    settings of that name) as a hex digest, once per process and settings."""
    if domain not in SOURCES:
        raise ValueError(f"no judge for domain {domain!r} (known: {', '.join(sorted(SOURCES))})")
    text = "\n".join(f"{k}={v}" for k, v in sorted(parts(domain, backend, image=image, build=build).items()))
    return hashlib.sha256(f"{domain}\n{text}".encode()).hexdigest()[:20]
