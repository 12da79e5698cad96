"""The execution layer: runs declared stages (``bonforge.stage``) against the store.

* ``shards.py``: ``run_node``, the shard runner (plan, resume, Ray or in process, commit);
* ``streams.py``: a stage's inputs read in ``problem_id`` order, a bounded batch at a time;
* ``shard_progress.py``: the rows a running shard has done (in process or from a Ray task), for the progress;
* ``run.py``: a build's ``Run`` (the committed-store fast path), which writes its run record
  (``bonforge.storage.run_record``);
* ``reuse.py``: row-level reuse (the row index, the look-up, the merge of reused and computed rows);
* ``prefect.py``: the Prefect task and flow.

The services a build runs in (a temporary Prefect server, or the warm ones of ``bonforge up``) live behind
``bonforge.services``; the process's one Ray start is ``bonforge.runtime.cluster``.

``build`` first walks the DAG with ``CommittedRun``: when every stage is committed it reads them from the
store alone, without starting Prefect or Ray, records the run and returns in about a second. On its way it
computes the early stages (the sources: a bad data file fails here, before any service starts). Otherwise
it walks the DAG again as a Prefect flow, one task per node still to compute (a committed node is read from
the store and gets no task), with Prefect's API and Ray started.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bonforge.config import Recipe
    from bonforge.storage.run_record import RunRecord
    from bonforge.engine.run import Dag, Run
    from bonforge.engine.shards import run_node

__all__ = ["Dag", "Run", "build", "run_node"]
log = logging.getLogger("bonforge")


def __getattr__(name: str):
    """``Dag``, ``Run`` and ``run_node`` load on first use (pyarrow, DuckDB): `bonforge run` hands its
    command to the warm builder of `bonforge up` without them."""
    if name in ("Dag", "Run"):
        from bonforge.engine import run

        return getattr(run, name)
    if name == "run_node":
        from bonforge.engine.shards import run_node

        return run_node
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build(dag: Dag, recipe: Recipe, store_root: str, recipe_dir: str = ".", run_id: str | None = None) -> RunRecord:
    """Build the recipe's dataset along ``dag`` and return the run record."""
    since = time.time()  # the record's wall time covers the early stages and the services' start
    from bonforge.config import check_installed
    from bonforge.engine.run import CommittedRun, NotCommitted, execute, record_interrupted
    from bonforge.llm.budget import BudgetStopped, spending
    from bonforge.report import report_after_build
    from bonforge.runtime.interrupt import as_interrupt, last_words
    from bonforge.storage.run_record import new_run_id
    from bonforge.storage.store import StageStore

    check_installed(recipe, store_root)  # before any key is derived (an S3 source's needs boto3) or stage runs
    run_id = run_id or new_run_id()
    first = CommittedRun(StageStore(store_root), recipe)
    stopped = functools.partial(record_interrupted, first.store, recipe, run_id, since)
    last_words.append(stopped)  # a signal while no run record is open (the services start) is recorded too
    with spending(recipe.budget) as budget:
        try:
            try:
                record = execute(dag, first, recipe_dir, run_id, record_start=False, since=since)
                log.info("every stage is committed (%d stages): nothing to compute",
                         sum(map(len, record.stages.values())))
                report_after_build(store_root, record, reuse=True)
                return record
            except NotCommitted as e:
                log.info("stage %s must be computed: starting the Prefect flow", e)
            from bonforge.engine.prefect import compute  # Prefect loads only here

            return compute(dag, recipe, store_root, recipe_dir, run_id, first.done, since)
        except BaseException as e:
            if as_interrupt(e):
                stopped()
            elif budget is not None and budget.exhausted:
                raise BudgetStopped(budget.line()) from e
            raise
        finally:
            last_words.remove(stopped)
