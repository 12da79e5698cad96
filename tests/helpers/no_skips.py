"""A pytest plugin (loaded by tests/conftest.py): with ``BONFORGE_NO_SKIPS=1`` (as .ci/run sets it) a test that
skips without the ``gpu`` mark fails the run. A CI machine that lacks a part (the data mirror, Docker, Chromium,
a model, tmpfs) would otherwise go green with whole batteries skipped."""

from __future__ import annotations

import os

import pytest

_SKIPPED: list[str] = []


def _enforced() -> bool:
    return os.environ.get("BONFORGE_NO_SKIPS") == "1"


def pytest_runtest_logreport(report) -> None:
    if report.skipped and _enforced() and "gpu" not in report.keywords:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        _SKIPPED.append(f"{report.nodeid}: {reason}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    if _SKIPPED and not hasattr(session.config, "workerinput") and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    if _SKIPPED:
        terminalreporter.write_sep("=", f"{len(_SKIPPED)} skipped without the gpu mark: failed (BONFORGE_NO_SKIPS=1)")
        for line in _SKIPPED:
            terminalreporter.write_line(line)
