"""The run record, ``runs/<run_id>.json``: what one run built and how (``bonforge runs``, the catalog's
``runs`` view, the viewer and the report read it).

Two kinds of run write one: a build (``RunRecord.build``, ``bonforge.engine.run.execute``) and a derived run,
which adds one stage to the stages of a base build (``RunRecord.derived``: ``bonforge.flows.insight``). Fields
that a run does not have (a build's ``kind``, a derived run's ``rows``, a failed build's dataset) are left out
of the JSON. A build returns its record typed (``engine.build``); the record is also a read-only mapping of
its JSON, as ``Manifest`` is, for what compares or prints records as they are on disk.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from dataclasses import dataclass, field, fields
from typing import Any, Iterator

from bonforge.storage import liveness


def utc_now(at: float | None = None) -> str:
    """An ISO timestamp with microseconds (of now, or of the epoch seconds ``at``): runs started within one
    second still sort in order."""
    when = datetime.now(timezone.utc) if at is None else datetime.fromtimestamp(at, timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def busy(spans: list[tuple[float, float]]) -> list[list[float]]:
    """When a stage computed shards (or a resource was busy): the union of the (begin, end) spans (seconds),
    as disjoint [begin, end] intervals in order (a stage computing without a pause is one)."""
    out: list[list[float]] = []
    for began, ended in sorted(spans):
        if out and began <= out[-1][1]:
            out[-1][1] = max(out[-1][1], round(ended, 3))
        else:
            out.append([round(began, 3), round(ended, 3)])
    return out


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


@dataclass(eq=False)
class RunRecord(Mapping):
    run_id: str
    recipe_name: str | None
    recipe: dict | None
    stages: dict[str, list[str]]  # stage -> the keys this run used, in DAG order
    cached: dict[str, list[str]]  # stage -> the keys it found committed
    status: str = "running"  # running, succeeded, failed, interrupted (Ctrl-C or SIGTERM)
    started: str = field(default_factory=utc_now)
    finished: str | None = None
    wall_s: float | None = None
    timings: dict[str, float] | None = None  # node label -> seconds
    rows: dict[str, dict[str, int]] | None = None  # node label -> rows computed / reused (a build)
    busy: dict[str, list[list[float]]] | None = None  # a build's: stage -> when it computed shards (epoch s)
    windows: dict[str, dict] | None = None  # a build's: node label -> its adaptive request window's summary and
    # history ([epoch s, requests allowed in flight] at each change: ``bonforge.llm.window``)
    dataset: str | None = None
    dataset_version: int | None = None
    rl_dataset: str | None = None
    fusion_dataset: str | None = None
    preference_dataset: str | None = None  # open-ended Best-of-N: the preference pairs
    sft_dataset: str | None = None  # export.sft: one correct answer (or trajectory) per kept problem
    error: str | None = None
    kind: str | None = None  # a derived run: "eval-selector", "maxk"
    base_run: str | None = None
    build_summary: dict | None = None  # a build's: problems in, kept, dropped by reason, verdicts by status
    report: str | None = None  # a build's HTML report, once written (``bonforge.report.report_after_build``)
    process: dict | None = None  # a build's: who writes it (``bonforge.storage.liveness``; a killed one is failed)
    extra: dict[str, Any] = field(default_factory=dict)  # what a derived run adds: its selector, its summary

    @classmethod
    def build(cls, recipe, run_id: str | None, stages: dict[str, list[str]], cached: dict[str, list[str]],
              started: str | None = None) -> RunRecord:
        """A build of ``recipe`` started at ``started`` (default now); ``stages``/``cached``: the run's maps,
        filled as it goes."""
        return cls(run_id or new_run_id(), recipe.name, recipe.model_dump(mode="json"), stages, cached,
                   started=started or utc_now(), process=liveness.stamp())

    @classmethod
    def derived(cls, base: dict, kind: str, stage: str, key: str, label: str, cached: bool, secs: float,
                **extra: Any) -> RunRecord:
        """The run that added ``stage`` (key ``key``, node ``label``) to the stages of the build ``base``, just
        now in ``secs`` seconds; ``cached``: it was committed already."""
        now = utc_now()
        was = {s: list(keys) for s, keys in base["stages"].items() if s != stage}
        return cls(new_run_id(), base.get("recipe_name"), base.get("recipe"), {**base["stages"], stage: [key]},
                   {**was, stage: [key]} if cached else was, "succeeded", now, now, round(secs, 3),
                   {label: round(secs, 3)}, dataset=base.get("dataset"), dataset_version=base.get("dataset_version"),
                   kind=kind, base_run=base["run_id"], extra=extra)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        """The record that ``json()`` wrote as ``data``."""
        names = {f.name for f in fields(cls)} - {"extra"}
        given = {k: v for k, v in data.items() if k in names}
        return cls(**{"recipe_name": None, "recipe": None, "stages": {}, "cached": {}, **given},
                   extra={k: v for k, v in data.items() if k not in names})

    def json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**{k: v for k, v in out.items() if v is not None}, **self.extra}

    def __repr__(self) -> str:
        """One line (the recipe it holds stays out: ``record.recipe``)."""
        made = f", dataset v{self.dataset_version}" if self.dataset_version is not None else ""
        kept = self.build_summary or {}
        if "kept" in kept:  # a build's summary, as `bonforge run` ends with it (its details: ``build_summary``)
            made = f", {kept['kept']} of {kept['problems']} problems kept" + made
        return (f"<RunRecord {self.run_id} of {self.recipe_name}: {self.status}, {len(self.stages)} stages{made}"
                + (f", report {self.report}" if self.report else "") + ">")

    def busy_shares(self) -> dict[str, tuple[float, float]]:
        """Each stage's busy seconds (its nodes' shards computing at once count once) and their share of the
        build's wall time."""
        wall = self.wall_s or 0.0
        out = {}
        for stage, spans in (self.busy or {}).items():
            secs = sum(end - begin for begin, end in spans)
            out[stage] = (round(secs, 1), secs / wall if wall else 0.0)
        return out

    # the read-only mapping of the JSON
    def __getitem__(self, name: str) -> Any:
        return self.json()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.json())

    def __len__(self) -> int:
        return len(self.json())
