"""LLM engines behind one small interface, and the `pool` importer of existing generations."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bonforge.llm.base import Engine
    from bonforge.llm.config import SampledTeacher


def make_engine(teacher: "SampledTeacher") -> "Engine":
    """The engine a teacher names. Heavy libraries (httpx, torch, vllm, ray) load only here."""
    if teacher.engine == "openai":
        from bonforge.llm.openai import OpenAIEngine

        return OpenAIEngine(teacher)
    if teacher.engine == "transformers":
        from bonforge.llm.transformers_engine import TransformersEngine

        return TransformersEngine(teacher)
    if teacher.engine == "vllm":
        from bonforge.llm.vllm_engine import VLLMEngine

        return VLLMEngine(teacher)
    raise ValueError(f"teacher {teacher.name!r}: engine {teacher.engine!r} does not generate")
