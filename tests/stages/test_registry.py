"""The stage registry comes from the declarations alone: every stage module's ``Stage`` objects, with their
schemas; ``bonforge show`` and ``bonforge sql --help`` take their stage list from it."""

from __future__ import annotations

import pyarrow as pa
from typer.testing import CliRunner

from bonforge import schema
from bonforge.cli import app
from bonforge.stage import Stage
from bonforge.stages import registry

EVERY_STAGE = {"problems", "contamination", "rounds", "candidates", "verdicts", "problem_stats", "genselect",
               "maxk_weights", "selector_eval", "fusion_pools", "fusion_select", "fusion", "fusion_open", "scores",
               "bon", "pairwise"}  # fmt: skip


def test_the_registry_names_every_stage_with_its_schema():
    stages = registry()
    assert set(stages) == EVERY_STAGE
    assert stages["verdicts"] == schema.VERDICTS and stages["fusion"] == schema.FUSION
    assert stages["scores"] == schema.SCORES and stages["bon"] == schema.BON and stages["pairwise"] == schema.PAIRWISE
    assert stages["fusion_open"] == schema.FUSION_OPEN
    assert all(isinstance(s, pa.Schema) and len(s) for s in stages.values())


def test_a_declaration_without_a_schema_is_refused(monkeypatch):
    import bonforge.stages.maxk as maxk

    registry.cache_clear()
    monkeypatch.setattr(maxk, "EXTRA", Stage("extra", "1", compute=lambda t: t), raising=False)
    try:
        try:
            registry()
        except TypeError as e:
            assert "'extra'" in str(e) and "no schema" in str(e)
        else:
            raise AssertionError("a stage without a schema was accepted")
    finally:
        registry.cache_clear()


def test_show_and_sql_help_list_every_stage(tmp_path):
    for command in ("show", "sql"):
        out = CliRunner().invoke(app, [command, "--help"]).output
        listed = " ".join(out.split("Stages (one view each):")[1].split()).rstrip(".").split(", ")
        assert set(listed) == EVERY_STAGE, command
    res = CliRunner().invoke(app, ["show", "fusion_pools", "--store", str(tmp_path)])
    assert res.exit_code == 2 and "no runs recorded" in res.output  # a known stage: the store is what is missing
