"""Runs inside the verl venv (``.ci/verl-venv``), driven by ``test_tool_build.py``: verl's own tool registry
builds the tool an RL export's manifest names and a rollout's calls go through it.

``python verl_tool_payload.py TOOLS.yaml`` prints one JSON line: the tool's name as the model sees it and, for
two trajectories (sessions) side by side, what each call answered and the status it reported.
"""

from __future__ import annotations

import asyncio
import json
import sys

from verl.tools.tool_registry import initialize_tools_from_config


async def main() -> None:
    (tool,) = initialize_tools_from_config(sys.argv[1])
    a, _ = await tool.create()
    b, _ = await tool.create()
    out = []
    for instance, code in ((a, "x = 6 * 7\nprint('set')"), (b, "print(x)"), (a, "print(x)"),
                           (a, "while True:\n    pass"), (a, {"code": 1})):
        response, reward, info = await tool.execute(instance, {"code": code} if isinstance(code, str) else code)
        out.append([response.text, info.get("status")])
    await tool.release(a)
    await tool.release(b)
    print(json.dumps({"name": tool.get_openai_tool_schema().function.name, "calls": out}))


if __name__ == "__main__":
    asyncio.run(main())
