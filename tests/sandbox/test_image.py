"""The sandbox image's inputs: the Debian mirror from this machine's apt sources, the engine from DOCKER_HOST."""

from __future__ import annotations

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
