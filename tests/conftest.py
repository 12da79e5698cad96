"""Fixtures for every test: a temporary store, quiet offline Prefect, the real data mirror."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Offline, quiet Prefect with its state in a per-session temp dir (set before any test imports prefect).
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")
os.environ.setdefault("BONFORGE_QUIET", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")


def pytest_addoption(parser) -> None:
    parser.addoption("--file-times", action="store_true",
                     help="End with a table of the seconds each test file took (setup, call and teardown of its "
                          "tests, its fixtures included), slowest first.")


_FILE_TIMES: dict[str, list[float]] = {}  # test file -> [seconds, tests]


def pytest_runtest_logreport(report) -> None:
    times = _FILE_TIMES.setdefault(report.nodeid.split("::")[0], [0.0, 0])
    times[0] += report.duration
    times[1] += report.when == "call" or (report.when == "setup" and report.skipped)


@pytest.hookimpl(trylast=True)  # after pytest's own summaries (--durations): the table ends the report
def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not config.getoption("--file-times") or not _FILE_TIMES:
        return
    terminalreporter.write_sep("=", "seconds per test file")
    for path, (secs, tests) in sorted(_FILE_TIMES.items(), key=lambda kv: -kv[1][0]):
        terminalreporter.write_line(f"{secs:9.1f} s  {tests:5d} tests  {path}")
    terminalreporter.write_line(f"{sum(t[0] for t in _FILE_TIMES.values()):9.1f} s  "
                                f"{sum(t[1] for t in _FILE_TIMES.values()):5d} tests  (all files)")


def pytest_sessionstart(session) -> None:
    import tempfile

    if "PREFECT_HOME" not in os.environ:
        os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="bonforge-prefect-")
    if "BONFORGE_HOME" not in os.environ:  # no warm services of `bonforge up` unless a test starts them
        os.environ["BONFORGE_HOME"] = tempfile.mkdtemp(prefix="bonforge-home-")


@pytest.fixture
def store(tmp_path):
    from bonforge.storage.store import StageStore

    return StageStore(tmp_path / "store")


@pytest.fixture(scope="session")
def gsm8k_pool(request) -> Path:
    path = (
        Path(os.environ.get("BONFORGE_DATA", REPO.parent / "shared" / "data"))
        / "gsm8k"
        / "example_model_solutions.jsonl"
    )
    if not path.is_file():
        pytest.skip(f"no data mirror with {path.name} (set BONFORGE_DATA)")
    return path


@pytest.fixture(scope="session", autouse=True)
def _data_env():
    """Point BONFORGE_DATA at the mirror beside the repository when the caller did not."""
    os.environ.setdefault("BONFORGE_DATA", str(REPO.parent / "shared" / "data"))
    yield


@pytest.fixture(scope="module", autouse=True)
def _no_ray_between_modules():
    """A build started in a test module leaves a local Ray session behind: shut it down after the
    module, so that the next module starts from a clean process (some start Ray with their own options)."""
    yield
    import sys

    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()
