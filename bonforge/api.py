"""bonforge from Python (a notebook, a script): build a recipe, then read a store's runs, stages and datasets as
Arrow tables (``.to_pandas()`` for a DataFrame). A thin layer over what the commands call:

* ``build(recipe, store=..., overrides=...)`` is ``bonforge run``: it prints what the command ends with and
  returns the typed run record;
* ``open(store)`` gives a ``Store``: ``runs()``, ``run(...)`` (a run as ``--run`` / ``--recipe`` resolve it,
  ``StageStore.run``; its ``summary()`` is what the build ended with), ``sql(query)`` (``bonforge sql``: the
  same DuckDB catalog), ``stage(name)`` (one stage's table of a run, all its keys together), ``diff(a, b)``
  (``bonforge diff``: two runs' verdicts side by side) and ``datasets()`` (the published versions, as
  ``bonforge datasets`` lists them).

``bonforge.build`` and ``bonforge.open`` are these two functions; importing ``bonforge`` loads neither.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa

from bonforge.errors import StoreError
from bonforge.storage.run_record import RunRecord
from bonforge.storage.store import StageStore

DEFAULT_STORE = "bonforge-store"


def build(recipe: str | os.PathLike | Mapping[str, Any], store: str | os.PathLike | None = None,
          overrides: list[str] | Mapping[str, Any] | None = None, fresh: bool = False,
          recipe_dir: str | os.PathLike | None = None, show: bool = True) -> RunRecord:
    """Build ``recipe`` (a YAML file, or the mapping such a file holds) into ``store`` (a folder or
    ``s3://bucket/prefix``; default ``$BONFORGE_STORE``, else ``./bonforge-store``) and return its run record
    (its ``repr`` one line); ``show``: print what ``bonforge run`` ends with (kept and dropped, verdicts,
    each dataset's rows, the time, the report), as ``Run.summary()`` gives it later.

    ``overrides``: ``["filter.max_pass_rate=0.75"]`` as ``--set`` takes them, or a mapping
    ``{"filter.max_pass_rate": 0.75}``. ``fresh``: recompute every stage and row (``--fresh``).
    ``recipe_dir``: the folder relative data paths resolve against (default: the recipe file's folder, or
    the working directory for a mapping). Bad input raises ``bonforge.errors.BonforgeError`` (its message
    is the CLI's ``error:`` line) before any work."""
    from bonforge.config import load_recipe, recipe_from_dict
    from bonforge.flows.build import build as run_dag
    from bonforge.services import quiet_prefect

    sets = _overrides(overrides) + (["reuse=false"] if fresh else [])
    if isinstance(recipe, Mapping):
        base = Path(recipe_dir or ".").resolve()
        rec = recipe_from_dict(dict(recipe), sets, base)
    else:
        path = Path(recipe)
        rec = load_recipe(path, sets)
        base = Path(recipe_dir).resolve() if recipe_dir else path.resolve().parent
    quiet_prefect()
    st = _store(store)
    record = run_dag(rec, str(st.root), str(base))
    if show:
        print(Run(st, record).summary())
    return record


def open(store: str | os.PathLike | None = None) -> Store:  # bonforge.open, as io.open
    """The store at ``store`` (default ``$BONFORGE_STORE``, else ``./bonforge-store``) for reading."""
    return Store(_store(store))


def _store(store) -> StageStore:
    return StageStore(store or os.environ.get("BONFORGE_STORE") or DEFAULT_STORE)


def _overrides(overrides) -> list[str]:
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):  # JSON is YAML: each value parses back as itself
        return [f"{path}={json.dumps(value)}" for path, value in overrides.items()]
    return list(overrides)


class Store:
    """A store's runs, stages and datasets. Where a run is not named, the store's default run is read (the
    latest that succeeded), or with ``recipe=NAME`` the latest run of that recipe."""

    def __init__(self, store: StageStore):
        self.store = store

    @property
    def root(self):
        return self.store.root

    def runs(self) -> list[RunRecord]:
        """Every run record, oldest first."""
        return self.store.runs()

    def run(self, run_id: str | None = None, *, recipe: str | None = None) -> Run:
        """The run ``run_id`` names (a prefix will do), or the latest of ``recipe``, or the default run."""
        return Run(self.store, self.store.run(run_id, recipe))

    def sql(self, query: str, run_id: str | None = None, *, recipe: str | None = None) -> pa.Table:
        return self.run(run_id, recipe=recipe).sql(query)

    def stage(self, name: str, run_id: str | None = None, *, recipe: str | None = None) -> pa.Table:
        return self.run(run_id, recipe=recipe).stage(name)

    def diff(self, a: str | None = None, b: str | None = None, *, recipe: str | None = None, stage: str | None = None,
             teacher: str | None = None, limit: int = 50) -> dict:
        """``bonforge diff A B``: the same candidates judged in runs ``a`` and ``b`` (ids or prefixes; with
        ``recipe`` and no ``b``, against the recipe's latest run), as the data ``--json`` prints: flips,
        confusion table, agreement (Cohen's kappa), per-problem changes (``bonforge.report.diff``)."""
        from bonforge.report.diff import diff, pair

        run_a, run_b = pair(self.store, a, b, recipe)
        return diff(self.store, run_a, run_b, stage, teacher, limit)

    def datasets(self, name: str | None = None) -> list[dict]:
        """The published dataset versions (of ``name``, or all), newest first per name, as `bonforge datasets`
        lists them: name, version, created, recipe, config, rows per split, latest, path."""
        from bonforge.storage.datasets import listing

        return listing(self.store.root, name)

    def __repr__(self) -> str:
        return f"bonforge.open({str(self.root)!r})"


class Run:
    """One run: its record (``record``), and its stages as Arrow tables."""

    def __init__(self, store: StageStore, record: RunRecord):
        self.store, self.record = store, record

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def stages(self) -> list[str]:
        return list(self.record.stages)

    def sql(self, query: str) -> pa.Table:
        """DuckDB SQL over one view per stage of this run, ``runs`` and ``run_stages`` (as ``bonforge sql``)."""
        from bonforge.storage.catalog import connect

        rel = connect(self.store, self.run_id).sql(query)
        return pa.table({}) if rel is None else rel.to_arrow_table()

    def stage(self, name: str) -> pa.Table:
        """The stage's table in this run: every committed output of it (one per teacher for candidates and
        verdicts) together, as the catalog's view holds it."""
        if name not in self.record.stages:
            raise StoreError(f"run {self.run_id} has no stage {name!r} (it has {', '.join(self.stages)})")
        return self.sql(f'SELECT * FROM "{name}"')

    def summary(self) -> str:
        """What ``bonforge run`` printed at the end of this build (``bonforge.report.summary.ending_lines``)."""
        from bonforge.report.summary import ending_lines

        return "\n".join(ending_lines(self.store, self.record))

    def __repr__(self) -> str:
        return f"<bonforge run {self.run_id} of {self.record.recipe_name}: {', '.join(self.stages)}>"
