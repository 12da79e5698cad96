"""No step, test or quick-start command runs an installed command by its bare name: on a fresh machine of
this kind (pyenv) the commands an install adds (``bonforge``, ``ruff``, ``pytest``, ``prefect``, ``weed``)
have no shim on PATH until ``pyenv rehash``, so CI starts tools through the interpreter (``python -m``,
``sys.executable``) and runs the tests with the scripts folder off PATH (``.ci/run``); a CLI call works so."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from functools import lru_cache
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = Path(sysconfig.get_path("scripts")).resolve()
RUNNERS = {"run", "Popen", "call", "check_call", "check_output", "start", "execv", "execvp", "execvpe",
           "create_subprocess_exec", "spawn"}  # what takes an argv first (subprocess, os, the tests' procs)
SHELL_WORD = re.compile(r"(?:^|&&|\|\||[;|(]|\bthen\b|\bdo\b)\s*(?:\w+=\S*\s+)*([\w.+-]+)")


@lru_cache(maxsize=1)
def installed_commands() -> frozenset[str]:
    """The names of the files that installed distributions put in the interpreter's scripts folder."""
    names = set()
    for dist in metadata.distributions():
        for f in dist.files or ():
            if f.parts[0] == ".." and Path(dist.locate_file(f)).resolve().parent == SCRIPTS:
                names.add(f.name)
    return frozenset(n for n in names if not n.startswith("python"))


def python_calls(source: str) -> list[str]:
    """Calls that start an installed command by its bare name: ``run(["ruff", ...])``, ``which("weed")``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        first = node.args[0]
        if name in RUNNERS and isinstance(first, (ast.List, ast.Tuple)) and first.elts:
            first = first.elts[0]
        elif name != "which" or any(k.arg == "path" for k in node.keywords):
            continue
        if isinstance(first, ast.Constant) and first.value in installed_commands():
            found.append(ast.unparse(node)[:80])
    return found


def shell_calls(text: str) -> list[str]:
    """Shell lines that start an installed command by its bare name (comments aside)."""
    lines = [line.split(" #")[0].strip() for line in text.splitlines() if not line.strip().startswith("#")]
    return [line for line in lines if any(m.group(1) in installed_commands() for m in SHELL_WORD.finditer(line))]


def test_the_checks_find_bare_names():
    assert shell_calls("set -e\nFOO=1 ruff check .\ncd x && pytest -q\n# ruff\npython -m ruff check .  # ruff\n") \
        == ["FOO=1 ruff check .", "cd x && pytest -q"]
    assert python_calls('subprocess.run(["bonforge", "run"])\nshutil.which("weed")\nstart(("prefect", "server"))\n'
                        'subprocess.run([sys.executable, "-m", "bonforge"])\nshutil.which("weed", path=p)\n'
                        'record["prefect"]\n') == ["subprocess.run(['bonforge', 'run'])", "shutil.which('weed')",
                                                   "start(('prefect', 'server'))"]


def test_no_step_test_or_quick_start_runs_an_installed_command_by_its_bare_name():
    assert {"bonforge", "ruff", "pytest", "prefect"} <= installed_commands()
    found = {p.name: shell_calls(p.read_text()) for p in (REPO / ".ci").iterdir() if p.is_file()}
    quick_start = (REPO / "README.md").read_text().split("## Quick start", 1)[1].split("```", 2)[1]
    found["README.md (quick start)"] = shell_calls(quick_start)
    assert "python -m pip install -e . " in quick_start and "[dev]" not in quick_start  # the plain install
    for path in sorted((REPO / "tests").rglob("*.py")) + sorted((REPO / "bonforge").rglob("*.py")):
        found[str(path.relative_to(REPO))] = python_calls(path.read_text())
    assert {where: calls for where, calls in found.items() if calls} == {}


def fresh_path(tmp: Path) -> str:
    """PATH as .ci/run gives it to the tests: no scripts folder, no folder of shims for its commands;
    ``python`` through a wrapper."""
    wrapper = tmp / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    dirs = [d for d in os.environ["PATH"].split(os.pathsep)
            if Path(d).resolve() != SCRIPTS and not os.access(Path(d, "bonforge"), os.X_OK)]
    return os.pathsep.join([str(tmp), *dirs])


def test_a_cli_call_works_without_the_scripts_folder_on_path(tmp_path):
    path = fresh_path(tmp_path)
    assert shutil.which("bonforge", path=path) is None and shutil.which("ruff", path=path) is None
    out = subprocess.run(["python", "-m", "bonforge", "runs", "--store", str(tmp_path / "store")], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PATH": path, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert "run_id" in out.stdout
