"""The Python tool for a trainer's multi-turn rollout: verl's ``BaseTool`` over bonforge's sandbox, the same
tool the sampling stage offers (``bonforge.llm.tools.SCHEMA``), run the same way (``sandbox.tool_calls``: each
call a fresh sandbox program replaying the trajectory's earlier calls, so a rollout's session lives exactly as
long as its trajectory and reads nothing of another's).

verl builds it from the tool config an RL export's manifest names (``trainers.verl.tool_config``, written
to a YAML file and given as ``actor_rollout_ref.rollout.multi_turn.tool_config_path``). It runs where verl
runs; without verl installed the class is a plain one (importable, not usable).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.tool_calls import PythonCalls

try:
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import ToolResponse
except ImportError:  # bonforge's own environment: verl lives in the trainer's
    BaseTool, ToolResponse = object, None

CLASS = f"{__name__}.SandboxPython"


def tool_config(schema: dict, time_limit_s: float, output_chars: int, sandbox: dict | None = None) -> dict:
    """verl's tool config (the YAML ``tool_config_path`` names) for this tool: its class, its settings and
    the OpenAI schema the model sees."""
    return {"tools": [{"class_name": CLASS, "config": {"type": "native", "time_limit_s": time_limit_s,
                                                       "output_chars": output_chars, "sandbox": sandbox or {}},
                       "tool_schema": schema}]}


class SandboxPython(BaseTool):
    """One tool object serves every rollout; ``create`` opens a trajectory's session (its cells so far),
    ``execute`` runs a call after them, ``release`` forgets them."""

    def __init__(self, config: dict, tool_schema: Any):
        super().__init__(config, tool_schema)
        self.calls = PythonCalls(CodeVerifyConfig(**config.get("sandbox", {})), float(config["time_limit_s"]))
        self.output_chars = int(config["output_chars"])
        self.cells: dict[str, list[str]] = {}

    async def create(self, instance_id: str | None = None, **kwargs) -> tuple[str, Any]:
        instance_id = instance_id or str(uuid.uuid4())
        self.cells[instance_id] = []
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[Any, float, dict]:
        code = parameters.get("code") if isinstance(parameters, dict) else None
        if not isinstance(code, str):
            return ToolResponse(text='error: the arguments must be {"code": "<python code>"}'), 0.0, {}
        cells = self.cells.setdefault(instance_id, []) + [code]
        (run,) = await asyncio.to_thread(self.calls, [cells])
        self.cells[instance_id] = cells
        return ToolResponse(text=run.shown(self.output_chars)), 0.0, {"status": run.status, "cpu_s": run.cpu_s}

    async def release(self, instance_id: str, **kwargs) -> None:
        self.cells.pop(instance_id, None)
