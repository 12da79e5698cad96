"""A committed stage output's manifest, read: ``stages/<stage>/<key>/manifest.json`` as a typed view.

The JSON on disk is one flat object. The store writes the output's identity and files (``stage`` ...
``created``), the engine adds where and how it ran (``hosts`` ... ``rows_reused``); whatever else it holds
comes from the node's ``note`` and the stage's ``summary`` (``teacher``, ``tokens``, ``comparison``, ...):
``extra``. Readers use the attributes; the view is also a read-only mapping of the JSON as it is on disk
(what tests compare and ``bonforge show`` prints).

A leaf module: the declaration (``bonforge.stage``), the store and the engine use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Iterator


@dataclass(frozen=True)
class Manifest(Mapping):
    """One stage output's manifest: the fields by name, the rest in ``extra`` (``from_json``)."""

    stage: str
    key: str
    version: str
    config: Any
    upstream: dict[str, str]
    files: list[str]
    rows: int
    rows_per_file: list[int]
    schema: list[str]
    timings: dict[str, Any] = field(default_factory=dict)  # wall_s, compute_s, busy (intervals: run_record.busy)
    created: str = ""
    hosts: list[str] = field(default_factory=list)
    ray_nodes: list[str] = field(default_factory=list)
    shards_per_node: dict[str, int] = field(default_factory=dict)  # Ray node id -> shards computed there
    shards_resumed: int = 0
    rows_resumed: int = 0  # rows an interrupted earlier run computed, in the shards this one resumed
    streamed: bool = False  # computed from a stream of whole problems (``Stage.stream``)
    row_index: str | None = None  # row reuse (``Stage.rows``): the index file, the rows computed / reused
    rows_computed: int | None = None
    rows_reused: int | None = None
    cached: bool = False  # never on disk: the engine found the output committed rather than computing it
    extra: dict[str, Any] = field(default_factory=dict)
    _data: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Manifest:
        missing = sorted(_REQUIRED - data.keys())
        if missing:
            raise ValueError(f"the manifest of {data.get('stage')!r} {data.get('key')} lacks {', '.join(missing)}")
        return cls(**{k: v for k, v in data.items() if k in _NAMES},
                   extra={k: v for k, v in data.items() if k not in _NAMES}, _data=dict(data))

    def json(self) -> dict[str, Any]:
        """The JSON data the view was read from (with ``cached`` where the engine set it)."""
        return dict(self._data)

    def with_cached(self, cached: bool) -> Manifest:
        return Manifest.from_json({**self._data, "cached": cached})

    def counts(self) -> tuple[int, int]:
        """The rows this computation computed and those it took from earlier work: from other outputs (row
        reuse) or from the shards an interrupted run had written (``rows_resumed``)."""
        reused = self.rows_reused or 0
        computed = self.rows - reused if self.rows_computed is None else self.rows_computed
        return computed - self.rows_resumed, reused + self.rows_resumed

    # the read-only mapping of the JSON
    def __getitem__(self, name: str) -> Any:
        return self._data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


_NAMES = frozenset(f.name for f in fields(Manifest)) - {"extra", "_data"}
_REQUIRED = frozenset(f.name for f in fields(Manifest) if f.default is MISSING and f.default_factory is MISSING)
