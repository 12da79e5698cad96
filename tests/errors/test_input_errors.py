"""`bonforge run` on bad input: one `error:` line naming what is wrong and how to fix it, exit code 2, and
no service started (the source stages run before Prefect and Ray; a start would fail these tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bonforge.cli import app

GOOD = {"question": "What is 1 + 1?", "answer": "2", "s": [{"solution": "A: 2", "ok": True}]}


pytestmark = pytest.mark.usefixtures("no_services")

def recipe(tmp_path: Path, problems: str = "problems.jsonl", extra: str = "", source_url: str = "") -> Path:
    url = f", url: '{source_url}', sha256: '{'0' * 64}'" if source_url else ""
    path = tmp_path / "recipe.yaml"
    path.write_text(f"""
name: bad
problems: {{name: toy, source: {{path: {problems}{url}}}}}
teachers:
  - {{name: t, engine: pool, source: {{path: pool.jsonl}}, samples: s, text: solution, label: ok}}
export: {{name: bad}}
{extra}""")
    return path


def write(tmp_path: Path, name: str, records: list) -> None:
    (tmp_path / name).write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))


def run(tmp_path: Path, path: Path, *extra: str) -> tuple[int, list[str]]:
    res = CliRunner().invoke(app, ["run", str(path), "--store", str(tmp_path / "store"), *extra])
    return res.exit_code, res.output.strip().splitlines()


CASES = {
    "missing data file": ([], {}, "data file 'problems.jsonl' not found: not at "),
    "offline without a mirror": ([], {"source_url": "http://127.0.0.1:9/problems.jsonl"},
                                 "could not download http://127.0.0.1:9/problems.jsonl"),
    "bad JSON record": ([GOOD, '{"question": "2 + 2?", '], {}, "record line 2: not valid JSON"),
    "missing field": ([GOOD, {"answer": "4"}], {}, "record line 2, field 'question': missing field"),
    "mistyped field": ([GOOD, {"question": ["2 + 2?"], "answer": "4"}], {},
                       "record line 2, field 'question': expected a string, got list"),
    "unknown teacher": ([GOOD], {"extra": "fusion: {teachers: {nope: 1}, fusor: {name: f, engine: openai, model: m}, "
                                          "export: {name: sft}}"},
                        "fusion.teachers: unknown teacher nope; known: t"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_error_line_before_any_service(tmp_path, monkeypatch, case):
    monkeypatch.setenv("BONFORGE_CACHE", str(tmp_path / "cache"))
    records, kw, message = CASES[case]
    if case != "missing data file" and case != "offline without a mirror":
        write(tmp_path, "problems.jsonl", records)
        write(tmp_path, "pool.jsonl", [GOOD])
    code, lines = run(tmp_path, recipe(tmp_path, **kw))
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    if case == "missing data file":
        assert f"not at {tmp_path / 'problems.jsonl'} (a relative path is read from the recipe's folder)" in lines[0]
        assert "set BONFORGE_DATA to a directory holding problems.jsonl" in lines[0]
    if case == "offline without a mirror":
        assert "Offline? Set BONFORGE_DATA to a directory that holds problems.jsonl" in lines[0]


def test_a_missing_absolute_path_is_said_to_be_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("BONFORGE_CACHE", str(tmp_path / "cache"))
    code, lines = run(tmp_path, recipe(tmp_path, problems=str(tmp_path / "nowhere" / "problems.jsonl")))
    assert code == 2 and lines == [f"error: data file {tmp_path / 'nowhere' / 'problems.jsonl'} does not exist"]


def test_a_failing_stage_names_stage_record_and_field_once(tmp_path):
    write(tmp_path, "problems.jsonl", [GOOD])
    write(tmp_path, "pool.jsonl", [{"question": "What is 1 + 1?", "s": [{"solution": "A: 2", "ok": "yes"}]}])
    code, lines = run(tmp_path, recipe(tmp_path))
    assert code == 2 and len(lines) == 1, lines
    assert lines[0] == (f"error: stage candidates[t]: {tmp_path / 'pool.jsonl'}, record line 1, field 's[0].ok': "
                        "label must be true/false, got 'yes'")
    record = json.loads(next((tmp_path / "store" / "runs").glob("*.json")).read_text())
    assert record["status"] == "failed" and "label must be true/false" in record["error"]


def test_the_real_command_prints_only_that_line_and_starts_nothing(tmp_path):
    """In a fresh process: stderr is the one line, and neither Prefect nor Ray was even imported."""
    write(tmp_path, "problems.jsonl", [GOOD, {"answer": "4"}])
    write(tmp_path, "pool.jsonl", [GOOD])
    driver = ("import atexit, sys\n"
              "atexit.register(lambda: print('loaded', [m for m in ('prefect', 'ray') if m in sys.modules]))\n"
              "from bonforge.cli import app\napp(sys.argv[1:])\n")  # fmt: skip
    res = subprocess.run([sys.executable, "-c", driver, "run", str(recipe(tmp_path)), "--store", str(tmp_path / "s")],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 2
    assert res.stderr.strip() == f"error: stage problems: {tmp_path / 'problems.jsonl'}, record line 2, field " \
                                 "'question': missing field (record has: answer)"
    assert res.stdout.strip() == "loaded []"


def test_python_dash_m_bonforge_is_the_same_command(tmp_path):
    write(tmp_path, "problems.jsonl", [GOOD, {"answer": "4"}])
    write(tmp_path, "pool.jsonl", [GOOD])
    argv = [sys.executable, "-m", "bonforge", "run", str(recipe(tmp_path)), "--store", str(tmp_path / "s")]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and res.stderr.strip().startswith("error: stage problems:"), res.stderr
