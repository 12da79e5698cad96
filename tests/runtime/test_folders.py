"""Where bonforge keeps per-user files (``runtime.folders``): everything under ``BONFORGE_HOME`` when it is set
(state in it, each cache in ``<name>-cache``), else the XDG folders; every cache of the package asks here."""

from __future__ import annotations

from bonforge.runtime.folders import cache_folder, home
from bonforge.sandbox import checker_cache
from bonforge.services import warm
from bonforge.sources import digest
from bonforge.viewer import catalog


def test_bonforge_home_holds_the_state_and_every_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("BONFORGE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("BONFORGE_DIGESTS", raising=False)
    assert home() == tmp_path / "home" and warm.record_path().parent == tmp_path / "home"
    assert checker_cache.root() == tmp_path / "home" / "checker-cache"
    assert catalog.cache_root() == tmp_path / "home" / "viewer-cache"
    assert digest.cache_path() == tmp_path / "home" / "digest-cache" / "digests.sqlite"


def test_without_it_the_xdg_folders(monkeypatch, tmp_path):
    monkeypatch.delenv("BONFORGE_HOME", raising=False)
    monkeypatch.delenv("BONFORGE_DIGESTS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert home() == tmp_path / "config" / "bonforge"
    assert cache_folder("viewer") == tmp_path / "cache" / "bonforge" / "viewer"
    assert checker_cache.root() == tmp_path / "cache" / "bonforge" / "checker"
    assert digest.cache_path() == tmp_path / "cache" / "bonforge" / "digest" / "digests.sqlite"
    monkeypatch.setenv("BONFORGE_DIGESTS", str(tmp_path / "mine.sqlite"))  # the digest cache's own override
    assert digest.cache_path() == tmp_path / "mine.sqlite"
