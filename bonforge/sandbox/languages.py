"""The languages the sandbox runs: how a program is written into the work directory, built once per candidate
and started for each test. Host side: the argv here is trusted (the recipe's and bonforge's, never a
candidate's); the runner only executes it inside the sandbox (``runner.py``: ``files``, ``build``, ``exec``).

Python runs in the runner's own warm interpreter (the zygote: no build, no exec). The others are Debian
packages of the sandbox image (``image.BASE_PACKAGES``): C++17 with g++, Java with OpenJDK (``java_names``: the
class that declares ``public static void main`` runs, whatever its visibility; the file is named after the
public top-level class, as javac requires), PyPy 3 (its build is a syntax check, so a syntax error is a
``compile_error`` as in Python).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Language:
    name: str
    tags: tuple[str, ...]  # fence tags and record values that name it (lower case)
    source: str  # the program's file in the work directory ({cls}: Java's file name)
    build: tuple[str, ...]  # the build's argv ({src}, {cls}, {main}, {mem}: placeholders); () = none
    run: tuple[str, ...]  # a test's argv
    address_limit: bool = True  # RLIMIT_AS applies (a JVM reserves far more address space than it uses)
    includes: tuple[str, ...] = ()  # build argv put before the source (its last) when the problem ships headers


PYTHON = Language("python", ("python", "py", "python3", "py3"), "solution.py", (), ())
LANGUAGES = {
    lang.name: lang
    for lang in (
        PYTHON,
        Language("cpp", ("cpp", "c++", "cc", "cxx", "c++17", "cpp17", "gnu++17"), "main.cpp",
                 ("g++", "-std=c++17", "-O2", "-pipe", "-o", "main", "{src}"), ("./main",), includes=("-I", "common")),
        Language("java", ("java",), "{cls}.java",
                 ("javac", "-J-XX:+UseSerialGC", "-J-Xmx{mem}m", "-J-XX:-UsePerfData", "-encoding", "UTF-8",
                  "-d", ".", "{src}"),
                 ("java", "-XX:+UseSerialGC", "-Xss64m", "-Xmx{mem}m", "-XX:-UsePerfData", "{main}"),
                 address_limit=False),
        Language("pypy", ("pypy", "pypy3"), "main.py",
                 ("pypy3", "-c", "import sys; compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')", "{src}"),
                 ("pypy3", "main.py")),
    )
}  # fmt: skip
_BY_TAG = {tag: lang for lang in LANGUAGES.values() for tag in (lang.name, *lang.tags)}
SCAN_CHARS = 1 << 20  # a Java program's text scanned for its classes (linear patterns, bounded input)
# Where a comment, a string, a text block or a character literal starts, and the rest of each up to its end.
_JAVA_OPENER = re.compile(r'"""|//|/\*|"|\'')
_JAVA_REST = {"//": re.compile(r"[^\n]*"), "/*": re.compile(r"(?s:.*?\*/|.*)"),
              '"""': re.compile(r'(?s:(?:\\.|[^\\])*?"""|.*)'), '"': re.compile(r'(?:\\.|[^"\\\n])*"?'),
              "'": re.compile(r"(?:\\.|[^'\\\n])*'?")}  # fmt: skip
_JAVA_TOKEN = re.compile(  # one word at a time (modifiers are gathered word by word: no pattern backtracks over them)
    r"(?P<decl>(?<![\w$.])(?:class|interface|enum|record)\s+(?P<name>[A-Za-z_$][\w$]{0,100}))"
    r"|(?P<main>(?<![\w$])void\s+main\s*\()"
    r"|(?P<package>(?<![\w$.])package\s+(?P<pkg>[\w$]{1,100}(?:\s*\.\s*[\w$]{1,100}){0,20})\s*;)"
    r"|(?P<word>[\w$]+)|[{}]")
_JAVA_MODIFIERS = frozenset(("public", "protected", "private", "abstract", "static", "final", "strictfp", "sealed",
                             "synchronized"))  # fmt: skip


def _java_code(program: str) -> str:
    """``program`` with its comments, strings, text blocks and character literals blanked out (a space each)."""
    out, i = [], 0
    while (m := _JAVA_OPENER.search(program, i)) is not None:
        out += [program[i : m.start()], " "]
        i = _JAVA_REST[m.group()].match(program, m.end()).end()
    out.append(program[i:])
    return "".join(out)


def java_names(program: str) -> tuple[str, str]:
    """(the source file's class name, the class to run) of a Java program: the file is named after the public
    top-level class (javac requires it), else after the class to run; that is the class declaring ``public
    static void main`` (the public top-level class's own first, then the first found; a nested class by its
    binary name, a package's classes by their qualified name), else the public class, else ``Main``. Read
    after comments, strings and character literals are blanked out, so a class named there is not taken."""
    package, public, mains = "", None, []
    classes, pending, depth, mods = [], None, 0, set()  # classes: (name, depth inside its body, public top-level)
    for m in _JAVA_TOKEN.finditer(_java_code(program[:SCAN_CHARS])):
        token = m.group()
        if m.group("word"):
            mods = mods | {token} if token in _JAVA_MODIFIERS else set()
            continue
        if m.group("decl"):
            pending = (m.group("name"), not classes and "public" in mods)
        elif m.group("main"):
            if classes and classes[-1][1] == depth and {"public", "static"} <= mods:
                mains.append(("$".join(c[0] for c in classes), classes[0][2]))
        elif m.group("package"):
            package = package or re.sub(r"\s", "", m.group("pkg")) + "."
        elif token == "{":
            depth += 1
            if pending:
                classes.append((pending[0], depth, pending[1]))
                public = public or (pending[0] if pending[1] else None)
                pending = None
        elif classes and classes[-1][1] == depth:  # "}"
            classes.pop()
            depth -= 1
        else:
            depth -= 1
        mods = set()
    main = next((name for name, in_public in mains if in_public), mains[0][0] if mains else public or "Main")
    return public or main.split("$")[0], package + main


def language_of(tag: str | None) -> Language | None:
    """The language a fence tag or a record's ``language`` names (case-insensitive), or None."""
    return _BY_TAG.get((tag or "").strip().lower())


def known_tags() -> frozenset[str]:
    return frozenset(_BY_TAG)


PACKAGE_SOURCE_DIR = "sol"  # where a program sits in a problem package's tree (its solutions' folder)


def native_fields(lang: Language, program: str, memory_mb: int, build_limits: dict,
                  include: dict[str, str] | None = None) -> dict:  # fmt: skip
    """The request fields that make the runner write, build and start ``program`` in ``lang`` (not Python):
    ``files``, ``build`` (with ``build_limits``: time_limit, wall_limit, memory_mb, output_limit) and ``exec``.
    ``include``: a problem package's headers by their path in its tree (``judging.spec``); a language that takes
    them (C++) is built as a solution of the package is, from ``sol/`` with ``-I common``."""
    cls, main = java_names(program) if lang.name == "java" else ("", "")
    tree = bool(include and lang.includes)
    src = lang.source.format(cls=cls)
    values = {"cls": cls, "main": main, "mem": str(memory_mb), "src": f"{PACKAGE_SOURCE_DIR}/{src}" if tree else src}
    files = [{"name": path, "text": text} for path, text in sorted(include.items())] if tree else []
    fields = {"files": [*files, {"name": values["src"], "text": program}],
              "exec": [a.format(**values) for a in lang.run], "address_limit": lang.address_limit}  # fmt: skip
    if lang.build:
        build_values = dict(values, mem=str(build_limits["memory_mb"]))
        argv = [a.format(**build_values) for a in lang.build]
        fields["build"] = dict(build_limits, argv=[*argv[:-1], *(lang.includes if tree else ()), argv[-1]])
    return fields
