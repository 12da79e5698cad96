"""The layering the README states: every module imports; no import cycle between bonforge modules (every
import statement counts, also those inside functions); stage modules (``stages/``) and the declaration
(``stage.py``) import neither the engine, the store, Ray nor Prefect, nor one another; stage keys are derived in
one place."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bonforge"
SCRIPTS = {"bonforge.sandbox.runner", "bonforge.sandbox.zygote"}  # run inside the sandbox container: they
# import their siblings there by flat names (codec, oskit, wire), nothing of the package


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str) -> set[str]:
    """Every module named by an import statement of module ``name`` (absolute names, any depth)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            names = {f"{base}.{a.name}" for a in node.names}
            if names - MODULES.keys():  # ``from pkg import mod`` names the module, not the package's __init__
                out.add(base)
            out |= names
    return out


def internal(names: set[str], own: str) -> set[str]:
    """The bonforge modules among ``names`` (``from pkg import mod`` names the module)."""
    out = set()
    for n in names:
        while n and n not in MODULES:
            n = n.rpartition(".")[0]
        if n and n != own:
            out.add(n)
    return out


GRAPH = {m: internal(imported(m), m) for m in MODULES}


def test_every_module_imports():
    for name in MODULES.keys() - SCRIPTS:
        importlib.import_module(name)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted(component + [v]))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_between_bonforge_modules():
    assert cycles(GRAPH) == []


FORBIDDEN = ("ray", "prefect", "bonforge.engine", "bonforge.storage")


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("bonforge.stages") or m == "bonforge.stage"))
def test_stage_modules_import_neither_engine_store_ray_nor_prefect(name):
    bad = sorted(n for n in imported(name) if any(n == f or n.startswith(f + ".") for f in FORBIDDEN))
    assert bad == [], f"{name} imports {bad}"


def test_importing_the_stages_loads_neither_ray_nor_prefect_nor_the_engine():
    code = ("import sys, pkgutil, importlib, bonforge.stages, bonforge.stage\n"
            "for m in pkgutil.iter_modules(bonforge.stages.__path__): importlib.import_module('bonforge.stages.' + "
                "m.name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'prefect') or "
                "m.startswith('bonforge.engine')))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_stage_key_has_one_caller():
    callers = [name for name, path in MODULES.items()
               if any(isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "stage_key"
                      for n in ast.walk(ast.parse(path.read_text())))]  # fmt: skip
    assert callers == ["bonforge.stage"]


def reaches(name: str, prefix: str) -> list[str]:
    """The modules under ``prefix`` that module ``name`` imports (directly)."""
    return sorted(m for m in GRAPH[name] if m == prefix or m.startswith(prefix + "."))


# Lower layers never import upper ones: running programs knows nothing of judging them, engines and the sandbox
# know nothing of recipes, stages or the engine, and the engine reaches `bonforge up`'s services through their seam.
DOWNWARD = [
    ("bonforge.sandbox", ("bonforge.judging", "bonforge.stages", "bonforge.engine", "bonforge.storage",
                          "bonforge.config", "bonforge.services")),
    ("bonforge.llm", ("bonforge.engine", "bonforge.stages", "bonforge.storage", "bonforge.services", "bonforge.config",
                      "bonforge.selection", "bonforge.scoring", "bonforge.judging")),
    # a kind's recipe model lives beside its code (judging/config.py, sandbox/config.py, ...): the code reads it
    # there, never through the recipe's model above it
    ("bonforge.judging", ("bonforge.stages", "bonforge.engine", "bonforge.storage", "bonforge.services",
                          "bonforge.config", "bonforge.selection", "bonforge.scoring")),
    ("bonforge.scoring", ("bonforge.stages", "bonforge.engine", "bonforge.storage", "bonforge.services",
                          "bonforge.config", "bonforge.selection", "bonforge.sources", "bonforge.flows")),
    # the recipe's model gathers the kinds' models and checks the templates it names: it stands below what reads it
    ("bonforge.config", ("bonforge.stages", "bonforge.engine", "bonforge.storage", "bonforge.services",
                         "bonforge.selection", "bonforge.sources", "bonforge.rewards", "bonforge.flows",
                         "bonforge.report", "bonforge.viewer")),
    # the prompt templates' text and loader: read by the recipe model, the scorers and the stages alike
    ("bonforge.templates", ("bonforge.config", "bonforge.selection", "bonforge.scoring", "bonforge.judging",
                            "bonforge.llm", "bonforge.sources", "bonforge.stages", "bonforge.engine",
                            "bonforge.storage", "bonforge.services")),
    ("bonforge.engine", ("bonforge.services.builder", "bonforge.services.warm", "bonforge.services.prefect_server")),
    # what the stages share is library code below them: the GenSelect/FusioN library, sources, tables, runtime
    ("bonforge.selection", ("bonforge.stages", "bonforge.engine", "bonforge.storage", "bonforge.services",
                            "bonforge.flows")),
    ("bonforge.sources", ("bonforge.stages", "bonforge.engine", "bonforge.storage", "bonforge.services")),
    ("bonforge.tables", ("bonforge.stages", "bonforge.engine", "bonforge.storage", "bonforge.services",
                         "bonforge.selection", "bonforge.sources", "bonforge.judging", "bonforge.llm")),
    ("bonforge.runtime", ("bonforge.stages", "bonforge.engine", "bonforge.storage", "bonforge.services",
                          "bonforge.selection", "bonforge.sources", "bonforge.judging", "bonforge.llm")),
    ("bonforge.storage.export", ("bonforge.stages",)),
]  # fmt: skip


@pytest.mark.parametrize("package, above", DOWNWARD, ids=[p for p, _ in DOWNWARD])
def test_no_import_runs_back_up_a_layer(package, above):
    bad = {m: found for m in GRAPH if m == package or m.startswith(package + ".")
           for found in [[x for a in above for x in reaches(m, a)]] if found}  # fmt: skip
    assert bad == {}, bad


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("bonforge.stages.")))
def test_a_stage_module_imports_no_other_stage_module(name):
    """A stage module holds its declaration and its compute; what two stages share lives in a library module
    (``metrics``, ``prompts``, ``selector``, ``sources``, ``judged_pool``, ...)."""
    assert reaches(name, "bonforge.stages") == [], f"{name} imports {reaches(name, 'bonforge.stages')}"


# The top level holds the contracts (a stage's declaration, keys and row identities, manifests, schemas,
# errors, the recipe's model) and the entry points (the command, the Python API); everything else lives in a
# package named for what it holds.
TOP_LEVEL = {"bonforge", "bonforge.__main__", "bonforge.cli", "bonforge.api", "bonforge.stage", "bonforge.keys",
             "bonforge.identity", "bonforge.manifest", "bonforge.schema", "bonforge.errors", "bonforge.config",
             "bonforge.config_model"}


def test_the_top_level_holds_only_contracts_and_entry_points():
    loose = {m for m, p in MODULES.items() if p.parent == PACKAGE}
    assert loose == TOP_LEVEL, f"new top-level modules {sorted(loose - TOP_LEVEL)}: put them in a package"


TESTS = PACKAGE.parent / "tests"
# whole builds, the bad-input battery, shared test code, the smoke runs of the scripts in benchmarks/
OWN_FOLDERS = {"builds", "errors", "helpers", "benchmarks"}


def test_the_tests_mirror_the_package():
    """Whoever changes ``bonforge/<package>/x.py`` finds its tests in ``tests/<package>/test_x*.py``."""
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    assert sorted(f for f in folders - OWN_FOLDERS if not (PACKAGE / f).is_dir()) == []


def test_no_two_test_files_share_a_name():
    """pytest imports test files by their base name (the suite imports sibling test modules by it): two files of
    one name in two folders stop the whole suite at collection."""
    names: dict[str, list[str]] = {}
    for path in TESTS.rglob("test_*.py"):
        names.setdefault(path.name, []).append(str(path.relative_to(TESTS)))
    assert {n: p for n, p in names.items() if len(p) > 1} == {}
