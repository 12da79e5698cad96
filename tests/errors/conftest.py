"""What the bad-input battery shares: a build that must fail before it starts any service."""

from __future__ import annotations

import pytest


@pytest.fixture
def no_services(monkeypatch, tmp_path):
    """Refuse any start of Prefect or Ray (a bad input is found before), with the process's caches (digests,
    downloads) in the test's folder and no shared data folder to fall back on."""
    import bonforge.engine.prefect as prefect

    def refuse(recipe):
        raise AssertionError("a service was started")

    monkeypatch.setattr(prefect, "services", refuse)
    monkeypatch.setenv("BONFORGE_DIGESTS", str(tmp_path / "digests.sqlite"))
    monkeypatch.setenv("BONFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("BONFORGE_DATA", raising=False)
