"""A patched judge judges again, an unpatched one never does: `bonforge run` (as a user runs it, through the
interpreter) of one recipe into one store, by the package here and by a copy of it whose maths judge was
edited in place with no version bump. Samples are counted in requests to a real OpenAI-compatible server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from llm_server import ScriptedServer
from test_reuse import N, solver, write_problems, write_recipe

from bonforge.judging import fingerprint
from bonforge.storage.store import StageStore

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
pytestmark = pytest.mark.slow  # three builds in subprocesses

JUDGING_LINE = 'return ("correct" if ok else "wrong_answer"), _shown(pred), None'


def _copy(tmp_path: Path, name: str, edit) -> Path:
    """The bonforge package copied to ``tmp_path/name/bonforge``, ``judging/math_rules.py`` edited by ``edit``."""
    root = tmp_path / name
    shutil.copytree(fingerprint.PACKAGE, root / "bonforge", ignore=shutil.ignore_patterns("__pycache__"))
    path = root / "bonforge" / "judging" / "math_rules.py"
    text = path.read_text()
    assert JUDGING_LINE in text, "the test's judging line moved: update JUDGING_LINE"
    path.write_text(edit(text))
    return root


def _build(tmp_path: Path, package_root: Path, output: bool = False):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package_root), str(HERE), str(REPO / "tests" / "helpers")])}
    argv = [sys.executable, "-m", "bonforge", "run", str(tmp_path / "recipe.yaml"), "--store", str(tmp_path / "store"),
            "--set", "problems.limit=6", "--set", "export.allow_empty=true"]  # a flipped judge leaves none to export
    # the working directory comes first on ``python -m``'s path: the package's own folder, never this checkout
    out = subprocess.run(argv, env=env, cwd=package_root, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    record = StageStore(tmp_path / "store").run()
    return (record, out.stdout) if output else record


def _statuses(tmp_path: Path, record: dict) -> list[str]:
    key = record["stages"]["verdicts"][0]
    table = StageStore(tmp_path / "store").read("verdicts", key).sort_by("candidate_id")
    return table.column("status").to_pylist()


def test_a_patched_judge_judges_again_a_restyled_one_does_not(tmp_path, shared_prefect):
    restyled = _copy(tmp_path, "restyled", lambda text: text.replace(
        JUDGING_LINE, "# only the layout of this line changed\n    return (\n        ('correct' if ok else "
        "'wrong_answer'),\n        _shown(pred),\n        None,\n    )").replace(
        '"""Stage `verdicts` for math,', '"""A rewritten docstring.\n\nStage `verdicts` for math,'))
    flip = JUDGING_LINE.replace('"correct" if ok else "wrong_answer"', '"wrong_answer" if ok else "correct"')
    patched = _copy(tmp_path, "patched", lambda text: text.replace(JUDGING_LINE, flip))
    with ScriptedServer(solver) as server:
        write_recipe(tmp_path / "recipe.yaml", server.url)
        write_problems(tmp_path, "problems.jsonl", 6)
        first = _build(tmp_path, REPO)
        assert server.count == 6 * N and first["rows"]["verdicts[served]"] == {"computed": 6 * N, "reused": 0}
        before = _statuses(tmp_path, first)
        assert {"correct", "wrong_answer"} <= set(before)

        same = _build(tmp_path, restyled)  # comments, a docstring, the layout of a line: nothing judged again
        assert same["stages"] == first["stages"] and server.count == 6 * N
        assert same["rows"].get("verdicts[served]", {"computed": 0})["computed"] == 0

        fixed, fixed_out = _build(tmp_path, patched, output=True)  # one judging line changed: all judged again
        assert server.count == 6 * N  # no sample drawn again
        assert fixed["rows"]["candidates[served]"]["computed"] == 0  # its committed output, as it was
        assert fixed["stages"]["verdicts"] != first["stages"]["verdicts"]
        assert fixed["stages"]["candidates"] == first["stages"]["candidates"]
        flipped = {"correct": "wrong_answer", "wrong_answer": "correct"}
        assert _statuses(tmp_path, fixed) == [flipped.get(s, s) for s in before]
        # the build says what it judged again and how many labels moved (bonforge.engine.rejudge)
        moved = sum(s in flipped for s in before)
        assert fixed["rows"]["verdicts[served]"] == {"computed": 6 * N, "reused": 0, "rejudged": 6 * N,
                                                     "flipped": moved}
        assert (fixed["build_summary"]["rejudged"], fixed["build_summary"]["flipped"]) == (6 * N, moved)
        assert f"re-judged: {6 * N} verdicts stored under an earlier judge (its fingerprint moved), {moved} " \
               "flipped" in fixed_out
