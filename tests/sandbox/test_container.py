"""Starting sandbox containers: an engine that refuses CAP_SYS_RESOURCE is said once, in one short line (the
engine's own long refusal only at debug level), and the containers start without the capability."""

from __future__ import annotations

import logging

import pytest

from bonforge.errors import SandboxError
from bonforge.sandbox import container
from bonforge.sandbox.config import CodeVerifyConfig

REFUSAL = "500 Server Error for http+docker://localhost/containers/create: " + "operation not permitted " * 12


@pytest.fixture
def engine(monkeypatch):
    """A fake engine: container_spec returns whether the capability is asked for; a runner asked for it is
    refused when ``refuses`` holds. Returns the capabilities the started runners got."""
    started: list[bool] = []
    state = {"refuses": True}

    def runner(spec, name, attach):
        if spec and state["refuses"]:
            raise SandboxError(REFUSAL)
        started.append(spec)
        return spec

    monkeypatch.setattr(container, "_sys_resource_refused", None)
    monkeypatch.setattr(container, "container_spec", lambda *a, sys_resource=True: sys_resource)
    monkeypatch.setattr(container, "ContainerRunner", runner)
    return state, started


def _start(n: int) -> None:
    for i in range(n):
        container.start_container(CodeVerifyConfig(build_image=False), "image", f"c{i}", "/tmp/sock")


def test_a_refused_capability_is_one_short_line_once(engine, caplog):
    _, started = engine
    with caplog.at_level(logging.DEBUG, logger="bonforge"):
        _start(3)
    assert started == [False, False, False]
    said = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(said) == 1 and "CAP_SYS_RESOURCE" in said[0].getMessage()
    assert len(said[0].getMessage()) <= 120 and said[0].levelno < logging.WARNING
    assert any(REFUSAL in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)


def test_a_granted_capability_is_kept_and_says_nothing(engine, caplog):
    state, started = engine
    state["refuses"] = False
    with caplog.at_level(logging.DEBUG, logger="bonforge"):
        _start(2)
    assert started == [True, True] and caplog.records == []
