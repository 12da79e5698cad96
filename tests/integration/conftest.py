"""Shared fixtures of the integration tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real data mirror: ``BONFORGE_DATA``, default ``../shared/data`` from the repository root."""
    path = Path(os.environ.get("BONFORGE_DATA", REPO.parent / "shared" / "data"))
    if not path.is_dir():
        pytest.skip(f"no data mirror at {path} (set BONFORGE_DATA)")
    return path


@pytest.fixture(scope="session")
def sandbox_image() -> str:
    """The sandbox image, built (offline) when missing. Skips when no Docker engine answers, unless
    ``BONFORGE_REQUIRE_DOCKER=1`` (then fails)."""
    try:
        answer = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, timeout=30)
        reason = answer.stderr.decode(errors="replace").strip()[:300] if answer.returncode else ""
    except (FileNotFoundError, subprocess.TimeoutExpired) as e:
        reason = f"docker client unusable: {e}"
    if reason:
        if os.environ.get("BONFORGE_REQUIRE_DOCKER") == "1":
            pytest.fail(f"BONFORGE_REQUIRE_DOCKER=1 but no Docker engine answers: {reason}")
        pytest.skip(f"no Docker engine answers: {reason}")
    from bonforge.sandbox.image import build_image

    return build_image()


@pytest.fixture(scope="session")
def docker_pool(sandbox_image):
    """A warm two-container pool with a 1 s limit, shared by the sandbox tests; closed at the end."""
    from bonforge.sandbox.config import CodeVerifyConfig
    from bonforge.sandbox.pool import SandboxPool

    pool = SandboxPool(CodeVerifyConfig(image=sandbox_image, pool_size=2, time_limit_s=1.0, memory_mb=256))
    pool.start()
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory):
    """A real S3 server (SeaweedFS) for the whole session; stopped at the end."""
    from s3 import SeaweedFS

    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"))
    yield server
    server.stop()


@pytest.fixture
def s3_env(seaweedfs, monkeypatch) -> dict:
    """The standard AWS settings pointing at the test server, set in this process for one test."""
    for name, value in seaweedfs.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    return {**os.environ, **seaweedfs.env}
