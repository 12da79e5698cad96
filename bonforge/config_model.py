"""The base of every recipe model, and the marker of execution-only fields (left out of stage keys).

A leaf module: the recipe (``bonforge.config``), the teacher models (``bonforge.llm.config``) and the
sandbox settings (``bonforge.sandbox.config``) all build on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


def exec_only(default: Any = None, **kw: Any) -> Any:
    """A field that changes how a stage runs, never what it produces (excluded from stage keys)."""
    return Field(default, json_schema_extra={"exec_only": True}, **kw)


def added(default: Any = None, **kw: Any) -> Any:
    """A field added after stage keys were in use: left out of the key while it holds its default, so the
    recipes written before it keep their keys (and their cached stages)."""
    return Field(default, json_schema_extra={"key_if_set": True}, **kw)


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def key_config(self) -> dict:
        """The model as JSON-able data without execution-only fields (what goes into a stage key)."""
        out = {}
        for name, field in type(self).model_fields.items():
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            value = getattr(self, name)
            if extra.get("exec_only") or (extra.get("key_if_set") and value == field.get_default()):
                continue
            out[name] = key_value(value)
        return out


def key_value(value: Any) -> Any:
    """``value`` as it goes into a stage key: models by their ``key_config``, paths as strings."""
    if isinstance(value, Model):
        return value.key_config()
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [key_value(v) for v in value]
    if isinstance(value, dict):
        return {k: key_value(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value
