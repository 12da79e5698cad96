"""A stage, declared once beside its compute; a node, the stage bound to its params and upstream outputs.

Each stage module ends with its declaration and a ``node()`` constructor, e.g. ``stages/problem_stats.py``::

    @dataclass(frozen=True)
    class ScoreParams(Params):
        score_cfg: ScoreConfig
        filter_cfg: FilterConfig

        def key_config(self) -> dict:
            return {"score": self.score_cfg.key_config(), "filter": self.filter_cfg.key_config()}

    STAGE = Stage("problem_stats", VERSION, params=ScoreParams, schema=PROBLEM_STATS, compute=score,
                  shard_rows=200_000, stream=_verdicts, stream_of="verdicts")

    def node(recipe, verdicts: list[Ref]) -> Node:
        return STAGE.bind(ScoreParams(recipe.score, recipe.filter), {"verdicts": verdicts})

A stage's params are one typed object: ``compute`` receives its fields as keyword arguments, ``open``, the
hooks (``inputs.params``), ``Rows.ids`` and ``summary`` (``written.node.params``) the object itself. The
key config is derived from it (``Params.key_config``), so what runs and what is keyed cannot disagree.
``Node.key`` is the only place a stage key is derived, and the engine (``bonforge.engine``) writes the
manifest's identity (stage, version, config, upstream) from the same node.

A leaf: this module imports neither the store, the engine, Ray nor Prefect. The engine gives the hooks
``table``, ``context`` and ``summary`` what they read (``Inputs``, ``Written``).
"""

from __future__ import annotations

import inspect
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import cached_property
from typing import Any, Callable, ContextManager, Iterator, Literal, Protocol, Union

import pyarrow as pa

from bonforge.config_model import key_value
from bonforge.errors import BonforgeError, TransientError, reasons
from bonforge.keys import stage_key
from bonforge.manifest import Manifest


@dataclass(frozen=True)
class Ref:
    """A committed stage output: its name, key and manifest (None only where a test names an output by key)."""

    stage: str
    key: str
    manifest: Manifest | None = field(default=None, repr=False, compare=False)

    @property
    def extra(self) -> dict:
        """The manifest's own fields (``teacher``, ``round``, a summary's); empty without a manifest."""
        return self.manifest.extra if self.manifest else {}


@dataclass(frozen=True)
class Pending(Ref):
    """An output still being computed (a streaming build, ``bonforge.engine.streaming``): its key is known, its
    manifest is not (None). ``output``: where the engine says which shards are written and when it commits;
    ``note``: the manifest fields its node states up front (``Node.note``), what ``extra`` gives meanwhile."""

    output: Any = field(default=None, repr=False, compare=False)
    note: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def extra(self) -> dict:
        return self.note


Upstream = Union[Ref, "list[Ref]"]


def unkeyed(default: Any = MISSING) -> Any:
    """A params field that changes how a stage runs, never what it writes (an engine handle, the recipe's
    folder): left out of the key config."""
    return field(default=default, metadata={"keyed": False})


def whole_key() -> Any:
    """The params field whose key config is the node's whole key config (a stage keyed by one recipe
    section as it is, e.g. ``problems``, ``verify.math``); mark the others ``unkeyed``."""
    return field(metadata={"keyed": "whole"})


@dataclass(frozen=True)
class Params:
    """The base of a stage's params: a frozen dataclass, one instance per node (``Stage.params``).

    ``key_config()`` is what the stage key covers: by default every field but the ``unkeyed`` ones by name,
    recipe models by their own ``key_config()``, or the ``whole_key`` field's alone; a stage whose key has
    another shape overrides it."""

    def key_config(self) -> Any:
        keyed = [f for f in fields(self) if f.metadata.get("keyed", True)]
        whole = [f for f in keyed if f.metadata.get("keyed") == "whole"]
        if whole and len(keyed) > 1:
            raise TypeError(f"{type(self).__name__}: {whole[0].name!r} is the whole key, so "
                            f"{next(f.name for f in keyed if f not in whole)!r} must be unkeyed")
        if whole:
            return key_value(getattr(self, whole[0].name))
        return {f.name: key_value(getattr(self, f.name)) for f in keyed}

    def compute_args(self) -> dict[str, Any]:
        """Every field by name: the keyword arguments ``compute`` receives."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Inputs(Protocol):
    """A node's input tables, one DuckDB view per input name (the catalog's names: ``problems``,
    ``candidates``, ``verdicts``, ``problem_stats``, ...); several refs under one name are one view.
    ``params``: the node's params (``Params``, ``None`` for a stage without), for hooks whose query
    depends on the config."""

    params: Any

    def __contains__(self, name: str) -> bool: ...

    def columns(self, name: str) -> list[str]:
        """The input's column names (of an output still being computed: of its first shard, once written)."""
        ...

    def read(self, name: str, columns: list[str] | None = None) -> pa.Table: ...

    def sql(self, query: str, params: Any = None) -> pa.Table: ...

    def tables(self, name: str) -> Iterator[pa.Table]:
        """The input's files one table at a time, in order (to stream large inputs)."""
        ...

    def aligned(self, columns: dict[str, list[str]]) -> ContextManager[Iterator[dict[str, pa.Table]]]:
        """The named inputs (name -> columns, ``problem_id`` among them) read side by side in ``problem_id``
        order, in chunks of whole problems of bounded bytes (the first name drives): name -> its rows of
        the chunk (``bonforge.engine.streams``)."""
        ...


class Written(Protocol):
    """Every shard of a stage written, its manifest not yet: what a ``summary`` reads."""

    node: "Node"
    compute: Callable[..., pa.Table]  # what ran: the opened compute for a stateful stage

    def read(self, columns: list[str] | None = None) -> pa.Table: ...

    def each(self, columns: list[str]) -> Iterator[pa.Table]:
        """Each shard's ``columns``, one shard at a time (bounded memory)."""
        ...

    def shard_metadata(self) -> list[dict[bytes, bytes]]:
        """Each shard's Parquet key-value metadata, in shard order."""
        ...


class Shortfall(BonforgeError):
    """A compute made some rows of its shard, not all (a stage that declares ``rows``): ``table`` holds the
    rows it made, ``missing`` counts those it could not make, ``why`` (reason -> rows) says why, ``retry``
    whether a later try may make them. The engine keeps the rows made, aside from the done shards, and takes
    them back when the shard is computed again (``bonforge.engine.shards``)."""

    def __init__(self, table: pa.Table, missing: int, why: dict[str, int], retry: bool):
        self.table, self.missing, self.why, self.retry = table, missing, why, retry
        super().__init__(f"{missing} rows missing ({reasons(why)})")

    def __reduce__(self):
        return (self.__class__, (self.table, self.missing, self.why, self.retry))


class RowsMissing(BonforgeError):
    """A stage ended with rows missing (its shards' ``Shortfall``s): every row made is kept, the stage is not
    committed, and the next try or build computes only the missing rows."""

    def __init__(self, missing: int, why: dict[str, int]):
        self.missing, self.why = missing, why
        super().__init__(f"{missing} rows missing ({reasons(why)}); every row received is kept: the next try "
                         "asks for the missing ones only")

    def __reduce__(self):
        return (self.__class__, (self.missing, self.why))


class RowsMissingForNow(RowsMissing, TransientError):
    """Every missing row failed for a reason a retry may fix (rate limits, timeouts)."""


@dataclass(frozen=True)
class Rows:
    """A stage whose rows can be taken from earlier outputs (``bonforge.engine.reuse``): the rows a shard's
    output will hold are known before it is computed, each with its content identity (``bonforge.identity``).

    * ``ids(shard, context, params) -> table`` (``params``: the node's ``Params``): one row per output row,
      in the order ``compute`` writes them: ``key`` (the output's row key: a column, or a tuple of columns
      such as ``("prompt_id", "run")``), ``row_id`` (the identity), ``problem_id`` and the output columns that
      belong to this build rather than to the content (ids, the teacher's name, the seed).
    * ``content``: the output columns a stored row supplies; ``schema``: the output's schema.
    * ``volatile``: column -> values of rows that say more about the run than the content (a sandbox
      failure, a verifier killed on a busy machine): they are never reused, so a later build tries again.
    * ``optional``: content columns an earlier output may lack (added since): reused rows get nulls there.
    * ``labels``: the content columns whose change is a flip (with a one-column ``key``). A stage that names
      them has ``ids`` give each row a ``base_id`` too, its identity without the judge (fingerprint and
      version): a computed row whose ``base_id`` a stored row has under another ``row_id`` is a re-judge,
      counted at commit with its flips (the manifest's ``rows_rejudged`` and ``rows_flipped``).

    Where some rows of a shard are reused, ``compute`` gets ``todo=<the ids rows still to compute>`` and
    returns those rows only."""

    key: str | tuple[str, ...]
    ids: Callable[[pa.Table, dict, Any], pa.Table]
    content: tuple[str, ...]
    schema: pa.Schema
    volatile: dict[str, tuple] = field(default_factory=dict)
    optional: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.key,) if isinstance(self.key, str) else self.key

    def row_keys(self, table: pa.Table) -> pa.Array | pa.ChunkedArray:
        """Each row's key as one value: the key column, or the key columns as strings, each prefixed by its
        length (no two different tuples give the same value)."""
        if isinstance(self.key, str):
            return table.column(self.key)
        import pyarrow.compute as pc

        parts = []
        for name in self.key:
            text = table.column(name).cast(pa.string())
            parts += [pc.binary_length(text).cast(pa.string()), pa.scalar(":"), text]
        return pc.binary_join_element_wise(*parts, "")


@dataclass(frozen=True)
class Stage:
    """Everything the engine and the store need about a stage, stated once, beside its compute.

    * ``name``: the store folder ``stages/<name>/<key>`` and the catalog view; ``version``: bump it when
      the same inputs give another output (the key changes).
    * ``params``: the class of the stage's params (a ``Params`` dataclass), ``None`` for a stage keyed by a
      constant (``bind`` then takes the key config itself).
    * ``compute(shard, **context, **params) -> table`` for a pure stage (every params field by name), or
      ``open(params)``: a context manager yielding ``compute(shard, **context)`` for a stateful one (an
      engine, a sandbox pool), opened only when the stage must be computed and closed after its last shard.
    * ``table(inputs)``: the input split into shards of whole problems (``shard_rows`` rows about);
      ``None``: a source stage, computed once from an empty table.
    * ``context(inputs)``: shared read-only inputs of every shard (put into Ray's object store once).
      Both hooks read the upstream views (``Inputs``) and, where the query depends on the config, the
      node's params (``inputs.params``); both run only when the stage must be computed.
    * ``executor``: ``"ray"`` runs shards as Ray tasks (when there are several, or Ray is up already),
      ``"local"`` in process.
    * ``compact_rows``: readers get files of about this many rows instead of one per shard.
    * ``summary(written)``: manifest fields computed from the written shards.
    * ``stream(inputs)``: instead of ``table``, the input as tables of whole problems in problem_id order
      (read with ``inputs.aligned``), which the engine cuts into shards as they come: the whole input is
      never in memory. ``shard_bytes``: a shard also closes once its strings hold this many bytes.
      ``stream_of``: the input whose rows the stream yields, every one of them (the progress bar's total, from
      that input's manifests; without it a streamed stage's bar has no total).
    * ``early``: computed in the build's own process before any service starts (cheap source stages that
      read the recipe's data files, so that bad input is reported at once).
    * ``schema``: the output table's schema (``bonforge.schema``): what ``bonforge show``, ``sql --help``, the
      report and the viewer know of the stage, from ``bonforge.stages.registry()``.
    * ``rows``: row-level reuse (``Rows``), for the stages whose rows are expensive (sampling, verification).
    * ``resource``: what a node's compute holds alone, from its params (a GPU with a model loaded): in a
      streaming build, nodes naming the same resource compute one at a time; None: shared (an endpoint, Ray).
    * ``reports``: ``compute`` also takes ``progress``, a function it calls as ``progress(done, of)`` when
      ``done`` of the shard's ``of`` units of work are done, so that the stage's progress moves while a long
      shard runs (``bonforge.engine.shard_progress``, in process and from Ray tasks alike).

    Shard sizes are not part of the key, but changing them makes an interrupted run start over.
    """

    name: str
    version: str
    params: type[Params] | None = None
    compute: Callable[..., pa.Table] | None = None
    open: Callable[[Any], ContextManager[Callable[..., pa.Table]]] | None = None
    table: Callable[[Inputs], pa.Table] | None = None
    stream: Callable[[Inputs], Iterator[pa.Table]] | None = None
    stream_of: str | None = None
    context: Callable[[Inputs], dict] | None = None
    shard_rows: int | None = None
    shard_bytes: int | None = None
    compact_rows: int | None = None
    executor: Literal["local", "ray"] = "local"
    summary: Callable[[Written], dict] | None = None
    early: bool = False
    schema: pa.Schema | None = None
    rows: Rows | None = None
    reports: bool = False
    resource: Callable[[Any], str | None] | None = None

    def __post_init__(self) -> None:
        if (self.compute is None) == (self.open is None):
            raise TypeError(f"stage {self.name!r}: give exactly one of compute and open")
        if self.compute is not None:
            self._check_compute()

    def _check_compute(self) -> None:
        """``compute`` takes every params field by name, and needs nothing that neither the params nor a
        ``context`` hook give."""
        given = [f.name for f in fields(self.params)] if self.params else []
        try:
            sig = inspect.signature(self.compute)
        except (TypeError, ValueError):  # a builtin or a callable without a signature: nothing to check
            return
        args = list(sig.parameters.values())[1:]  # the first is the shard
        if any(a.kind is a.VAR_KEYWORD for a in args):
            return
        names = {a.name for a in args}
        unknown = [n for n in given if n not in names]
        if unknown:
            raise TypeError(f"stage {self.name!r}: compute {self.compute.__name__}() takes no argument {unknown[0]!r} "
                            f"(a field of {self.params.__name__})")
        needed = [a.name for a in args if a.default is a.empty and a.kind is not a.VAR_POSITIONAL
                  and a.name not in given]
        if needed and self.context is None:
            owner = f"its params ({self.params.__name__})" if self.params else "its params (none)"
            raise TypeError(f"stage {self.name!r}: compute {self.compute.__name__}() needs {needed[0]!r}, which "
                            f"neither {owner} nor a context hook give")

    def bind(
        self,
        params: Any,
        upstream: dict[str, Upstream | None],
        *,
        inputs: dict[str, Upstream | None] | None = None,
        label: str | None = None,
        note: dict | None = None,
        **overrides: Any,
    ) -> "Node":
        """The node of this stage for ``params`` (an instance of ``Stage.params``; for a stage without, the
        key config itself) and ``upstream`` (name -> ref or list of refs; ``None`` entries are left out, not
        keyed as null). The key config is ``params.key_config()``.

        ``inputs``: the views the hooks read when they differ from ``upstream`` (e.g. a table whose key is
        implied by another upstream). ``note``: manifest fields known up front. ``overrides``: stage fields
        for this node only, e.g. ``shard_rows``."""
        if self.params is None and isinstance(params, Params):
            raise TypeError(f"stage {self.name!r} declares no params, got {type(params).__name__}")
        if self.params is not None and not isinstance(params, self.params):
            raise TypeError(f"stage {self.name!r}: bind() takes {self.params.__name__}, got {type(params).__name__}")
        config, params = (params, None) if self.params is None else (params.key_config(), params)
        stage = replace(self, **overrides) if overrides else self
        ups = {k: v for k, v in upstream.items() if v is not None}
        views = {k: v for k, v in (upstream if inputs is None else inputs).items() if v is not None}
        return Node(stage, config, ups, {k: v if isinstance(v, list) else [v] for k, v in views.items()},
                    label or self.name, params, note or {})


@dataclass(frozen=True)
class Node:
    """A stage applied to its params and upstream outputs: its key is known before anything runs.
    ``config``: the key config (derived from ``params``)."""

    stage: Stage
    config: Any
    upstream: dict[str, Upstream]
    inputs: dict[str, list[Ref]] = field(repr=False)
    label: str  # "verdicts[gpt3]": logs, the Prefect task run, the run record's timings
    params: Params | None = field(repr=False)
    note: dict = field(repr=False)

    @cached_property
    def upstream_keys(self) -> dict[str, str]:
        """A single ref is its key; a list is its keys sorted and joined by commas."""
        return {k: v.key if isinstance(v, Ref) else ",".join(sorted(r.key for r in v))
                for k, v in self.upstream.items()}

    @cached_property
    def key(self) -> str:
        return stage_key(self.stage.name, self.stage.version, self.config, self.upstream_keys)
