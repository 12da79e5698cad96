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


SMALL_BUILD = """
import json, sys
from pathlib import Path
import bonforge
folder = Path(sys.argv[1])
(folder / "problems.jsonl").write_text(json.dumps({"question": "What is 2 + 3?", "answer": "5"}) + "\\n")
(folder / "pool.jsonl").write_text(json.dumps({"question": "What is 2 + 3?", "samples": ["A: 5", "A: 6"]}) + "\\n")
recipe = {"name": "small", "problems": {"name": "small", "source": {"path": "problems.jsonl"}},
          "teachers": [{"name": "t", "engine": "pool", "source": {"path": "pool.jsonl"}}],
          "verify": {"math": {"patterns": ["A:\\\\s*(.+?)\\\\s*$"]}}, "export": {"name": "small"}}
record = bonforge.build(recipe, store=folder / "store", recipe_dir=folder, show=False)
ray = sys.modules.get("ray")
print(record.status, record.dataset_version, ray is not None and ray.is_initialized())
"""


def test_a_small_build_starts_no_ray(tmp_path, shared_prefect):
    """Every stage of a small build is one shard, computed in the build's process: no local Ray is started
    (it was started beside Prefect's server for every build: seconds, or a start that timed out when loaded)."""
    import os

    env = {**os.environ, "PREFECT_API_URL": shared_prefect, "RAY_ADDRESS": ""}
    out = subprocess.run([sys.executable, "-c", SMALL_BUILD, str(tmp_path)], cwd=REPO, capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["succeeded", "1", "False"]
