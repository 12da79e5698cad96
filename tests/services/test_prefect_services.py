"""What a build gets from ``services`` and leaves behind, without starting a server: flow runs on the
Prefect server of `bonforge up` send no heartbeats (Prefect would wait up to 2 s at the end of each flow for
its heartbeat thread), a configured server keeps Prefect's defaults; a build that ran nothing on Ray does
not import Ray to stop sandboxes (~1.5 s); the warm builder completes Prefect's deferred pydantic models once,
so that its children do not build them again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bonforge.config import load_recipe

REPO = Path(__file__).resolve().parents[2]
RECIPE = load_recipe(REPO / "recipes" / "gsm8k-genselect.yaml")
WARM = {"prefect": {"url": "http://127.0.0.1:9/api"}, "ray": {"address": "127.0.0.1:9", "token_path": "/none"}}


@pytest.fixture
def warm_services(monkeypatch):
    from bonforge.services import warm

    for name in ("PREFECT_API_URL", "RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(warm, "current", lambda: WARM)


def test_flow_runs_on_the_warm_server_send_no_heartbeats(warm_services):
    from prefect.settings import get_current_settings

    from bonforge.services import for_build

    with for_build(RECIPE):
        settings = get_current_settings()
        assert settings.api.url == WARM["prefect"]["url"] and settings.flows.heartbeat_frequency is None
    assert get_current_settings().flows.heartbeat_frequency == 180  # Prefect's default again


def test_a_configured_server_keeps_prefects_heartbeats(warm_services):
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    from bonforge.services import for_build

    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:8/api"}), for_build(RECIPE):
        settings = get_current_settings()
        assert settings.api.url == "http://127.0.0.1:8/api" and settings.flows.heartbeat_frequency == 180


def python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                          timeout=300).stdout.split()  # fmt: skip


def test_stopping_sandboxes_imports_no_ray():
    out = python("import sys; from bonforge.engine.prefect import stop_sandboxes; stop_sandboxes(); "
                 "print('ray' in sys.modules)")  # fmt: skip
    assert out == ["False"]


def test_the_builder_completes_prefects_deferred_models():
    out = python("import prefect.flow_engine; from prefect.client.schemas.objects import FlowRun; "
                 "print(FlowRun.__pydantic_complete__); from bonforge.services.builder import "
                     "_complete_prefect_models; "
                 "_complete_prefect_models(); print(FlowRun.__pydantic_complete__)")  # fmt: skip
    assert out == ["False", "True"]
