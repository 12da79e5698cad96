"""The sandbox image's inputs: the Debian mirror from this machine's apt sources, the engine from DOCKER_HOST."""

from __future__ import annotations

import os

import pytest

from bonforge.errors import SandboxError
from bonforge.sandbox import image


@pytest.fixture
def sources(tmp_path, monkeypatch):
    folder, listing = tmp_path / "sources.list.d", tmp_path / "sources.list"
    folder.mkdir()
    monkeypatch.setattr(image, "APT_SOURCES", (folder, listing))
    monkeypatch.delenv("BONFORGE_DEBIAN_MIRROR", raising=False)
    return folder, listing


def test_the_mirror_comes_from_the_apt_sources(sources):
    folder, listing = sources
    listing.write_text("# none here\ndeb [arch=amd64] http://mirror.example/debian/ bookworm main\n")
    assert image.debian_mirror() == "http://mirror.example/debian"
    (folder / "debian.sources").write_text("Types: deb\nURIs: http://other.example/debian\nSuites: bookworm\n")
    assert image.debian_mirror() == "http://other.example/debian"


def test_no_apt_source_is_a_clear_error(sources, monkeypatch):
    with pytest.raises(SandboxError, match="no Debian mirror.*BONFORGE_DEBIAN_MIRROR"):
        image.debian_mirror()
    monkeypatch.setenv("BONFORGE_DEBIAN_MIRROR", "http://set.example/debian")
    assert image.debian_mirror() == "http://set.example/debian"


def test_no_registry_hostname_in_the_module():
    assert "debian.org" not in image.Path(image.__file__).read_text()


def test_docker_host_is_the_engine_asked(tmp_path, monkeypatch):
    """The SDK client follows DOCKER_HOST: an engine socket that does not exist is a SandboxError, not a
    traceback of the HTTP library."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    image.client.cache_clear()
    try:
        with pytest.raises(SandboxError, match="no Docker engine answers"):
            image.image_exists("bonforge-sandbox:none")
    finally:
        image.client.cache_clear()


@pytest.mark.docker
def test_cleanup_removes_only_this_users_containers(sandbox_image, monkeypatch):
    """On a Docker engine shared by several users, `bonforge sandbox cleanup` removes the containers this
    user's sandboxes started (labelled at creation), never another user's; --all-users removes both."""
    import subprocess

    from typer.testing import CliRunner

    from bonforge.cli import app

    def create(labels: dict) -> str:
        argv = ["docker", "create", *[a for k, v in labels.items() for a in ("--label", f"{k}={v}")], sandbox_image,
                "true"]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()

    def exists(cid: str) -> bool:
        return subprocess.run(["docker", "inspect", cid], capture_output=True).returncode == 0

    # a user and a sandbox label of this test's own: the commands below remove no live sandbox of another
    # process (a second pytest worker's pools); what they select by stays the code's own
    monkeypatch.setattr(image, "LABEL", f"bonforge.sandbox.test-{os.getpid()}")
    monkeypatch.setattr(image, "user", lambda: f"tester-{os.getpid()}:0")
    mine = create(image.labels())
    theirs = create({**image.labels(), image.USER_LABEL: "someone-else:4242", image.OWNER_LABEL: "elsewhere:1"})
    try:
        res = CliRunner().invoke(app, ["sandbox", "cleanup"])
        assert res.exit_code == 0, res.output
        assert not exists(mine) and exists(theirs)
        res = CliRunner().invoke(app, ["sandbox", "cleanup", "--all-users"])
        assert res.exit_code == 0 and not exists(theirs), res.output
    finally:
        subprocess.run(["docker", "rm", "-f", mine, theirs], capture_output=True)
