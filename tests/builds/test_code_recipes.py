"""The shipped code recipes run end to end through the spine (Docker sandbox verification on Ray) to a
dataset version, with the published labels reproduced and reference solutions added as a teacher."""

from __future__ import annotations

from pathlib import Path

import pytest
from golden_keys import assert_golden

from bonforge.config import load_recipe
from bonforge.flows.build import build
from bonforge.runtime.processes import pid_alive
from bonforge.sandbox import image
from bonforge.sandbox.oskit import descendants
from bonforge.storage.catalog import connect
from bonforge.storage.store import StageStore

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _containers() -> set[str]:
    """The running sandbox containers that this test process or a process under it (a Ray worker of its local
    cluster) started, or whose owner has gone (a leak, whoever started it): not another pytest worker's."""
    import os
    import socket
    import subprocess

    out = subprocess.run(["docker", "ps", "--filter", f"label={image.LABEL}=1", "--format",
                          '{{.ID}} {{.Label "' + image.OWNER_LABEL + '"}}'], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    ours = descendants(os.getpid()) | {os.getpid()}

    def started_here(owner: str) -> bool:
        host, _, pid = owner.rpartition(":")
        return host == socket.gethostname() and pid.isdigit() and (int(pid) in ours or not pid_alive(int(pid)))

    return {cid for cid, _, owner in (line.partition(" ") for line in out.splitlines()) if started_here(owner)}


def test_apps_recipe_reproduces_labels_and_publishes(tmp_path, sandbox_image, data_dir):
    recipe = load_recipe(RECIPES / "apps-genselect.yaml")
    before = _containers()  # pools other tests of this process keep warm
    record = build(recipe, str(tmp_path / "store"), str(RECIPES))
    assert record["status"] == "succeeded" and record["dataset_version"] == 1
    assert_golden("apps-genselect", record)
    con = connect(StageStore(tmp_path / "store"))
    rows = con.sql("SELECT v.teacher, v.correct, c.reference_correct FROM verdicts v JOIN candidates c "
                   "USING (candidate_id)").fetchall()
    coderl = [(ok, ref) for t, ok, ref in rows if t == "coderl"]
    assert len(coderl) == 83 and all(ok == ref for ok, ref in coderl)
    assert all(ok for t, ok, _ in rows if t == "reference")  # every reference solution passes
    assert con.sql("SELECT count(*) FROM genselect").fetchall()[0][0] > 0
    assert _containers() - before == set()  # the build stopped its sandbox pools


def test_humaneval_recipe_with_reference_teacher(tmp_path, sandbox_image, data_dir):
    recipe = load_recipe(RECIPES / "humaneval-genselect.yaml",
                         ["problems.limit=12", "problems.include_reference=true"])
    record = build(recipe, str(tmp_path / "store"), str(RECIPES))
    assert_golden("humaneval-genselect", record)
    con = connect(StageStore(tmp_path / "store"))
    per = dict(con.sql("SELECT teacher, count(*) FROM verdicts GROUP BY teacher").fetchall())
    assert per == {"codegen16b": 12 * 8, "reference": 12}
    assert con.sql("SELECT bool_and(correct) FROM verdicts WHERE teacher = 'reference'").fetchall()[0][0]
    statuses = {s for (s,) in con.sql("SELECT DISTINCT status FROM verdicts").fetchall()}
    assert "passed" in statuses and "wrong_answer" in statuses  # failed checks are wrong answers
    assert Path(record["dataset"], "verl", "train.parquet").is_file()
