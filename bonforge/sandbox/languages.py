"""The languages the sandbox runs: how a program is written into the work directory, built once per candidate
and started for each test. Host side: the argv here is trusted (the recipe's and bonforge's, never a
candidate's); the runner only executes it inside the sandbox (``runner.py``: ``files``, ``build``, ``exec``).

Python runs in the runner's own warm interpreter (the zygote: no build, no exec). The others are Debian
packages of the sandbox image (``image.BASE_PACKAGES``): C++17 with g++, Java with OpenJDK (the public class's
name is the file's, ``Main`` when there is none), PyPy 3 (its build is a syntax check, so a syntax error is a
``compile_error`` as in Python).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Language:
    name: str
    tags: tuple[str, ...]  # fence tags and record values that name it (lower case)
    source: str  # the program's file in the work directory ({cls}: Java's class name)
    build: tuple[str, ...]  # the build's argv ({src}, {cls}, {mem}: placeholders); () = none
    run: tuple[str, ...]  # a test's argv
    address_limit: bool = True  # RLIMIT_AS applies (a JVM reserves far more address space than it uses)


PYTHON = Language("python", ("python", "py", "python3", "py3"), "solution.py", (), ())
LANGUAGES = {
    lang.name: lang
    for lang in (
        PYTHON,
        Language("cpp", ("cpp", "c++", "cc", "cxx", "c++17", "cpp17", "gnu++17"), "main.cpp",
                 ("g++", "-std=c++17", "-O2", "-pipe", "-o", "main", "{src}"), ("./main",)),
        Language("java", ("java",), "{cls}.java",
                 ("javac", "-J-XX:+UseSerialGC", "-J-Xmx{mem}m", "-J-XX:-UsePerfData", "-encoding", "UTF-8",
                  "{src}"),
                 ("java", "-XX:+UseSerialGC", "-Xss64m", "-Xmx{mem}m", "-XX:-UsePerfData", "{cls}"),
                 address_limit=False),
        Language("pypy", ("pypy", "pypy3"), "main.py",
                 ("pypy3", "-c", "import sys; compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')", "{src}"),
                 ("pypy3", "main.py")),
    )
}  # fmt: skip
_BY_TAG = {tag: lang for lang in LANGUAGES.values() for tag in (lang.name, *lang.tags)}
_JAVA_CLASS = re.compile(r"\bpublic\s+(?:final\s+|abstract\s+)*class\s+([A-Za-z_$][\w$]{0,100})")
SCAN_CHARS = 1 << 20  # a Java program's text scanned for its public class (linear pattern, bounded input)


def language_of(tag: str | None) -> Language | None:
    """The language a fence tag or a record's ``language`` names (case-insensitive), or None."""
    return _BY_TAG.get((tag or "").strip().lower())


def known_tags() -> frozenset[str]:
    return frozenset(_BY_TAG)


def java_class(program: str) -> str:
    m = _JAVA_CLASS.search(program[:SCAN_CHARS])
    return m.group(1) if m else "Main"


def native_fields(lang: Language, program: str, memory_mb: int, build_limits: dict) -> dict:
    """The request fields that make the runner write, build and start ``program`` in ``lang`` (not Python):
    ``files``, ``build`` (with ``build_limits``: time_limit, wall_limit, memory_mb, output_limit) and ``exec``."""
    cls = java_class(program) if lang.name == "java" else ""
    values = {"cls": cls, "mem": str(memory_mb), "src": lang.source.format(cls=cls)}
    fields = {"files": [{"name": values["src"], "text": program}],
              "exec": [a.format(**values) for a in lang.run], "address_limit": lang.address_limit}  # fmt: skip
    if lang.build:
        build_values = dict(values, mem=str(build_limits["memory_mb"]))
        fields["build"] = dict(build_limits, argv=[a.format(**build_values) for a in lang.build])
    return fields
