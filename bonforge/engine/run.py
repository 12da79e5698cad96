"""A build: the DAG walked by a ``Run`` that turns each node into a committed ``Ref``, and its run record.

``CommittedRun`` reads every node from the store and stops at the first that is not committed: the fast
path of a rebuild with nothing to compute. It computes the early stages (the sources) on its way, so that
bad input fails before any service starts. ``PrefectRun`` (``bonforge.engine.prefect``) computes the rest, one
node after another; with ``engine.streaming``, ``StreamingRun`` starts them all at once, each as soon as what it
reads exists (``bonforge.engine.streaming``).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa

from bonforge.config import Recipe
from bonforge.storage.run_record import RunRecord, busy
from bonforge.engine.shards import StoreInputs, run_node
from bonforge.engine.streaming import Cancelled, Output, streamed
from bonforge.errors import BonforgeError
from bonforge.llm import budget
from bonforge.manifest import Manifest
from bonforge.runtime.interrupt import as_interrupt, last_words as words
from bonforge.runtime.progress import stage_progress
from bonforge.stage import Node, Pending, Ref, Upstream
from bonforge.storage.run_record import utc_now
from bonforge.storage.store import StageStore
from bonforge.tables.cost import dataset_rows

log = logging.getLogger("bonforge")

Dag = Callable[[Recipe, "Run", Path], dict]  # (recipe, run, recipe_dir) -> the published dataset


class Run:
    """Runs the nodes of one build and remembers what each did, for the run record."""

    quiet = False

    def __init__(self, store: StageStore, recipe: Recipe, done: dict[str, tuple[Manifest, float]] | None = None):
        self.store, self.recipe = store, recipe
        self.done = {} if done is None else done  # key -> (manifest, seconds) of the nodes computed early
        self.record: dict[str, list[str]] = {}
        self.cached: dict[str, list[str]] = {}
        self.timings: dict[str, float] = {}
        self.rows: dict[str, dict[str, int]] = {}  # label -> rows computed / reused by this build
        self.busy: dict[str, list[list[float]]] = {}  # stage -> when its nodes computed shards (``run_record.busy``)
        self.windows: dict[str, dict] = {}  # label -> its endpoint's request window (``bonforge.llm.window``)
        self._noting = threading.Lock()  # a streaming run notes nodes from their threads

    def __call__(self, node: Node) -> Ref:
        raise NotImplementedError

    def _note(self, node: Node, manifest: Manifest, cached: bool, secs: float) -> Ref:
        self._enter(node)
        return self._done(node, manifest, cached, secs)

    def _enter(self, node: Node) -> None:
        """The node is one of the run's (in the order the DAG calls them: the record does not depend on timing)."""
        if "round" not in node.note:  # a round of early stopping draws into outputs that are not the run's tables
            with self._noting:
                self.record.setdefault(node.stage.name, []).append(node.key)

    def _done(self, node: Node, manifest: Manifest, cached: bool, secs: float) -> Ref:
        name, key = node.stage.name, node.key
        computed, reused = (0, 0) if cached else manifest.counts()
        with self._noting:
            if cached and "round" not in node.note:
                self.cached.setdefault(name, []).append(key)
            self.timings[node.label] = round(secs, 3)
            self.rows[node.label] = {"computed": computed, "reused": reused}
            if not cached and manifest.extra.get("concurrency"):
                self.windows[node.label] = manifest.extra["concurrency"]
            if not cached and manifest.timings.get("busy"):
                spans = self.busy.get(name, []) + manifest.timings["busy"]
                self.busy[name] = busy([(a, b) for a, b in spans])
        rejudged = 0 if cached else manifest.extra.get("rows_rejudged", 0)
        if rejudged:  # verdicts stored under an earlier judge, judged again (``bonforge.engine.rejudge``)
            self.rows[node.label] |= {"rejudged": rejudged, "flipped": manifest.extra["rows_flipped"]}
        if not self.quiet:
            how = "cached" if cached else f"computed in {secs:.1f}s" + (f" ({reused} rows reused)" if reused else "")
            how += f" ({rejudged} re-judged, {manifest.extra.get('rows_flipped')} flipped)" if rejudged else ""
            log.info("%-36s %8s rows  %s  (key %s)", node.label, manifest.rows, how, key)
        return Ref(name, key, manifest)

    def wait(self, ref: Ref) -> Ref:
        """``ref`` committed, with its manifest (a streaming run's ``Pending`` ref waits for its commit)."""
        return ref

    def join(self, failed: bool = False) -> None:
        """Wait for every node started (a streaming run's); ``failed``: the build failed, stop them."""

    def inputs(self, **refs: Upstream) -> StoreInputs:
        """Committed outputs as named views, for what the DAG does besides stages (exports)."""
        return StoreInputs(self.store, {k: [self.wait(r) for r in (v if isinstance(v, list) else [v])]
                                        for k, v in refs.items()})

    def values(self, ref: Ref, column: str) -> set:
        """The distinct values of one column of a committed output."""
        ref = self.wait(ref)
        return set(self.store.read(ref.stage, ref.key, [column]).column(column).to_pylist())

    def publish(self, name: str, parts: Iterable[dict[str, pa.Table]] | Iterator[dict[str, pa.Table]],
                trainers: dict | None = None) -> dict:
        """Publish ``parts`` as the next version of dataset ``name`` (or reuse the version with the same
        content), its lineage the recipe, its overrides and the stages run so far (``engine.lineage``), split
        as ``export.validation_fraction`` says; ``trainers``: the manifest's section for trainers."""
        from bonforge.engine.lineage import lineage
        from bonforge.storage.datasets import publish
        from bonforge.storage.splits import Split

        self.join()  # the lineage and summary read the manifests of every stage run so far
        fraction = self.recipe.export.validation_fraction
        split = Split(fraction, self.recipe.seed) if fraction else None
        with stage_progress(f"export[{name}]", None) as advance:  # a million problems' export takes a minute
            return publish(self.store.loc, name, _counted([parts] if isinstance(parts, dict) else parts, advance),
                           lineage(self.store, self.recipe, self.record), trainers, split)


def _counted(parts: Iterable[dict[str, pa.Table]], advance: Callable[[int], None]) -> Iterator[dict[str, pa.Table]]:
    """``parts``, telling ``advance`` the rows of each part (its largest format's) as the next is asked for."""
    for part in parts:
        yield part
        advance(max((t.num_rows for t in part.values()), default=0))


class NotCommitted(BonforgeError):
    """A stage of the build must be computed."""


class StageFailed(BonforgeError):
    """A stage raised a bonforge error: the message names the stage, then what went wrong (for an error
    raised in a Ray task, the original one, without Ray's wrapper and its remote traceback)."""

    def __init__(self, label: str, cause: BaseException):
        self.label, self.cause = label, cause
        while type(cause).__name__.startswith("RayTaskError") and getattr(cause, "cause", None) is not None:
            cause = cause.cause
        super().__init__(f"stage {label}: {cause}")

    def __reduce__(self):
        return (self.__class__, (self.label, self.cause))


@contextlib.contextmanager
def failing_as(node: Node):
    """Bonforge errors raised in the block become a StageFailed naming ``node``."""
    try:
        yield
    except StageFailed:
        raise
    except BonforgeError as e:
        raise StageFailed(node.label, e) from e


class CommittedRun(Run):
    """Reads each node from the store and computes the early ones in this process; raises NotCommitted at
    the first other node that needs work."""

    quiet = True

    def __call__(self, node: Node) -> Ref:
        fresh = not self.recipe.reuse
        if not fresh and self.store.exists(node.stage.name, node.key) and node.key not in self.done:
            return self._note(node, self.store.manifest(node.stage.name, node.key), True, 0.0)
        if not node.stage.early:
            raise NotCommitted(node.label)
        t0 = time.perf_counter()
        with failing_as(node):
            manifest = run_node(self.store, node, reuse_rows=not fresh)
        self.done[node.key] = (manifest, time.perf_counter() - t0)
        return self._note(node, manifest, False, self.done[node.key][1])


class StreamingRun(Run):
    """Starts each node that is not committed on a thread of its own and returns its ``Pending`` ref at once.
    ``compute(node, output)``: how a node is computed once its awaited inputs are committed (in process here).
    ``wait`` gives a committed ref (the DAG reads data: a round's table, whether a dataset is empty); ``join``
    waits for every node started."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.started: list[Output] = []
        self._resources: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def __call__(self, node: Node) -> Ref:
        ref = self.ready(node)
        if ref is not None:
            return ref
        self._enter(node)
        output = Output(node.label)
        self.started.append(output)
        thread = threading.Thread(target=contextvars.copy_context().run, args=(self._go, node, output),
                                  name=node.label, daemon=True)
        thread.start()
        return Pending(node.stage.name, node.key, output=output, note=node.note)

    def ready(self, node: Node) -> Ref | None:
        """The node's ref when nothing is to compute (committed, or computed early), else None."""
        if node.key in self.done:  # computed early, by this build
            manifest, secs = self.done[node.key]
            return self._note(node, manifest, False, secs)
        if self.recipe.reuse and self.store.exists(node.stage.name, node.key):
            return self._note(node, self.store.manifest(node.stage.name, node.key), True, 0.0)
        return None

    def compute(self, node: Node, output: Output) -> Manifest:
        with failing_as(node):
            return run_node(self.store, node, self.recipe.reuse, output)

    def _go(self, node: Node, output: Output) -> None:
        try:
            resource = node.stage.resource and node.stage.resource(node.params)
            read_as_written = None if resource else streamed(node)  # one holding a resource never waits in it
            for ref in (r for name, refs in node.inputs.items() if name != read_as_written for r in refs):
                if isinstance(ref, Pending):
                    ref.output.wait()
            with self._held(resource):
                if output.cancelled:
                    raise Cancelled(f"stage {node.label}: stopped")
                t0 = time.perf_counter()
                manifest = self.compute(node, output)
            output.committed(self._done(node, manifest, manifest.cached, time.perf_counter() - t0))
        except BaseException as e:
            output.failed(e)

    def _held(self, resource: str | None):
        if resource is None:
            return contextlib.nullcontext()
        with self._lock:
            lock = self._resources.setdefault(resource, threading.Lock())
        return lock

    def wait(self, ref: Ref) -> Ref:
        return ref.output.wait() if isinstance(ref, Pending) else ref

    def join(self, failed: bool = False) -> None:
        """Wait for every node started; the first error is raised. ``failed``: the build failed already: the
        nodes stop between shards, and no error of theirs is raised."""
        for output in self.started if failed else ():
            output.cancelled = True
        first: BaseException | None = None
        for output in list(self.started):
            try:
                output.wait()
            except BaseException as e:
                first = first or e
        if first is not None and not failed:
            raise first


def execute(dag: Dag, run: Run, recipe_dir: str, run_id: str | None, record_start: bool,
            since: float | None = None) -> RunRecord:
    """Walk ``dag`` with ``run``; returns the run record (written to the store unless ``run`` stopped
    at a stage that is not committed). ``since``: when the build began (epoch seconds; default now), before
    its early stages and its services: the record's ``started`` and ``wall_s`` count from there."""
    recipe, store = run.recipe, run.store
    since = time.time() if since is None else since
    record = RunRecord.build(recipe, run_id, run.record, run.cached, started=utc_now(since))
    spent = budget.active()
    if record_start:
        store.record_run(record)

    def stopped_in_a_c_call() -> None:  # the interrupt's watchdog ends the process: record it first
        record.status, record.error = "interrupted", "interrupted (the build did not stop within its grace time)"
        record.finished, record.wall_s = utc_now(), round(time.time() - since, 3)
        _record(store, record)

    try:
        words.append(stopped_in_a_c_call)
        try:
            dataset = dag(recipe, run, Path(recipe_dir))
            run.join()
        except BaseException:
            run.join(failed=True)
            raise
        record.status, record.dataset, record.dataset_version = "succeeded", dataset["path"], dataset["version"]
        record.rl_dataset = dataset.get("rl_dataset", {}).get("path")
        record.fusion_dataset = dataset.get("fusion_dataset", {}).get("path")
        record.preference_dataset = dataset.get("preference_dataset", {}).get("path")
        record.sft_dataset = dataset.get("sft_dataset", {}).get("path")
        record.build_summary = _summary(store, run.record, run.cached, dataset_rows(dataset.get("files", {})))
        rejudged = [r for r in run.rows.values() if r.get("rejudged")]
        if record.build_summary is not None and rejudged:
            record.build_summary |= {"rejudged": sum(r["rejudged"] for r in rejudged),
                                     "flipped": sum(r["flipped"] for r in rejudged)}
    except NotCommitted:
        raise
    except BaseException as e:
        stop = as_interrupt(e)  # Ctrl-C or SIGTERM: what is committed stays committed
        over = not stop and spent is not None and spent.exhausted  # stopped by the budget (bonforge.llm.budget)
        record.status = "interrupted" if stop else "stopped_by_budget" if over else "failed"
        record.error = (f"interrupted by {stop}" if stop else spent.line() if over
                        else f"{type(e).__name__}: {e}"[:2000])
        raise
    finally:
        words.remove(stopped_in_a_c_call)
        record.finished, record.wall_s = utc_now(), round(time.time() - since, 3)
        record.timings, record.rows, record.busy = run.timings, run.rows, run.busy or None
        if spent is not None:
            record.extra["budget"] = spent.json()
        record.windows = run.windows or None
        if record.status != "running":
            _record(store, record)
    return record


def _summary(store: StageStore, stages: dict[str, list[str]], cached: dict[str, list[str]],
             kept_rows: int) -> dict | None:
    """What the build kept and dropped, and what it cost (``bonforge.report.summary``); a failure only logs a
    warning."""
    from bonforge.report.summary import build_summary

    try:
        return build_summary(store, stages, cached, kept_rows)
    except Exception as e:  # the summary must never fail the build it describes
        log.warning("the build's summary could not be computed: %s: %s", type(e).__name__, e)
        return None


def _record(store: StageStore, record: RunRecord) -> None:
    """Write the run record; a failed build's own error goes first (a full disk fails this write too)."""
    try:
        store.record_run(record)
    except BonforgeError as e:
        if record.status == "succeeded":
            raise
        log.warning("the run record of %s could not be written: %s", record.run_id, e)


def record_interrupted(store: StageStore, recipe: Recipe, run_id: str, since: float) -> None:
    """Record the build ``run_id`` as interrupted, unless its record says already how it ended (a signal
    between its stages, while no record was open: the services starting)."""
    path = store.loc.path("runs", f"{run_id}.json")
    with contextlib.suppress(BonforgeError, OSError, ValueError):
        if store.loc.is_file(path) and json.loads(store.loc.read_bytes(path)).get("status") != "running":
            return
    record = RunRecord.build(recipe, run_id, {}, {}, started=utc_now(since))
    record.status, record.error = "interrupted", "interrupted before its stages ran"
    record.finished, record.wall_s = utc_now(), round(time.time() - since, 3)
    _record(store, record)
