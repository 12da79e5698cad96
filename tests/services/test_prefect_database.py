"""The Prefect servers bonforge starts use a database of their own per Prefect version: a default database
that another Prefect version has migrated (its alembic revision unknown to this one) does not break a
build, and a server that does not start is one `error:` line, not Prefect's 200-line traceback."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import prefect
import pytest
from prefect.settings import PREFECT_HOME, temporary_settings

from bonforge.services.prefect_server import database_env

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "gsm8k-genselect.yaml"
UNKNOWN = "ffffffffffff"  # a revision this Prefect does not know: the database of another version


def migrated_elsewhere(path: Path) -> None:
    """A Prefect database whose schema another Prefect version has migrated to a revision unknown here."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
        db.execute("DELETE FROM alembic_version")
        db.execute("INSERT INTO alembic_version VALUES (?)", [UNKNOWN])


def revision(path: Path) -> str:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT version_num FROM alembic_version").fetchall()[0][0]


def build(tmp_path: Path, prefect_home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "RAY_ADDRESS")}
    env |= {"PREFECT_HOME": str(prefect_home), "BONFORGE_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "bonforge", "run", str(RECIPE), "--set", "problems.limit=8",
                           "--store", str(tmp_path / "store")], env=env, capture_output=True, text=True,
                          timeout=900)  # fmt: skip


def test_the_database_is_per_prefect_version_unless_one_is_configured(tmp_path):
    import prefect.settings as ps

    with temporary_settings(updates={PREFECT_HOME: tmp_path}):
        ours = tmp_path / f"bonforge-{prefect.__version__}" / "prefect.db"
        assert database_env() == {"PREFECT_SERVER_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{ours}"}
        assert ours.parent.is_dir()
    for setting in (ps.PREFECT_SERVER_DATABASE_CONNECTION_URL, ps.PREFECT_API_DATABASE_CONNECTION_URL):
        with temporary_settings(updates={PREFECT_HOME: tmp_path, setting: "postgresql+asyncpg://db/prefect"}):
            assert database_env() == {}  # the user's own


@pytest.mark.slow
def test_a_database_migrated_by_another_prefect_version_does_not_break_a_build(tmp_path, gsm8k_pool):
    home = tmp_path / "prefect-home"
    migrated_elsewhere(home / "prefect.db")  # Prefect's default database, as another version left it
    out = build(tmp_path, home)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "dataset gsm8k-genselect v1" in out.stdout
    assert revision(home / "prefect.db") == UNKNOWN  # not touched
    assert revision(home / f"bonforge-{prefect.__version__}" / "prefect.db") != UNKNOWN  # ours, migrated here


@pytest.mark.slow
def test_a_prefect_server_that_does_not_start_is_one_error_line(tmp_path, gsm8k_pool):
    home = tmp_path / "prefect-home"
    migrated_elsewhere(home / f"bonforge-{prefect.__version__}" / "prefect.db")  # even our own database
    out = build(tmp_path, home)
    assert out.returncode == 2, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert errors[0].startswith("error: the build's Prefect server exited (database sqlite+aiosqlite:///")
    assert errors[0].endswith(f"Can't locate revision identified by '{UNKNOWN}'")
