"""The report a finished build notes: a build that computed nothing takes the report of an earlier run with the
same stages; either way the stored run record names it (what `bonforge runs` and the Python API read), not only
the record the build returned."""

from __future__ import annotations

from bonforge.report import report_after_build
from bonforge.storage.run_record import RunRecord
from bonforge.storage.store import StageStore

STAGES = {"problems": ["p"], "verdicts": ["v"]}


def test_a_build_that_computed_nothing_names_the_earlier_report_in_its_stored_record(tmp_path):
    store = StageStore(tmp_path)
    store.record_run(RunRecord("old", "r", {"name": "r"}, STAGES, {}, "succeeded", "2026-01-01T00:00:00Z"))
    earlier = store.loc.path("reports", "old", "report.html")
    store.loc.write_bytes(earlier, b"<html></html>")
    other = RunRecord("other", "r", {"name": "r"}, {"problems": ["q"]}, {}, "succeeded", "2026-01-01T00:00:01Z")
    store.record_run(other)  # a later run of other stages: not taken
    new = RunRecord("new", "r", {"name": "r"}, dict(STAGES), dict(STAGES), "succeeded", "2026-01-01T00:00:02Z")
    store.record_run(new)
    report_after_build(str(tmp_path), new, reuse=True)
    assert new.report == str(earlier)
    assert store.run("new").report == str(earlier)
    assert store.run("other").report is None
