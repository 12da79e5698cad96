"""A streaming build (``engine.streaming: true``): a node is computed on a thread of its own as soon as the
inputs it waits for are committed, while the DAG walk goes on. A call of the run returns at once a ``Pending``
ref: its key is known before anything runs (a stage key never needed its upstream's data), so the nodes
downstream are bound and started too. A node waits for every pending input but the one its stage streams
(``Stage.stream_of``): that one it reads shard by shard as it is written (``streams.Growing``), so a problem
range sampled is verified while the next one samples.

Nothing else changes: each node is still one ``run_node`` (one Prefect task in a Prefect build), writing its
shards as they finish and its manifest after its last; a rerun after a crash computes the missing shards.
Nodes whose stage names the same ``Stage.resource`` (a GPU holding a model) compute one at a time.

* ``Output``: what this process knows of a node being computed (its shards written, its commit or error);
* ``bonforge.engine.run.StreamingRun``: the ``Run`` that starts nodes on threads (``compute``: in process; the
  Prefect run's, a Prefect task);
* ``resolved``: a node's inputs once those it waits for are committed;
* ``Ahead``: a streamed stage's shards, cut on a thread one ahead, saying whether the next is ready.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
from typing import Any, Iterable, Iterator

from bonforge.errors import BonforgeError
from bonforge.stage import Node, Pending, Ref

log = logging.getLogger("bonforge")


class Cancelled(BonforgeError):
    """The build stopped (another node failed, or it was interrupted): this node stops between shards."""


class Output:
    """A node being computed in this process: the shards written so far, then its committed ref (or its
    error). Readers wait on it; the node's ``run_node`` and thread tell it."""

    def __init__(self, label: str):
        self.label = label
        self._cond = threading.Condition()
        self._written: set[int] = set()
        self._shards: int | None = None  # how many, once the last is written
        self._ref: Ref | None = None
        self._error: BaseException | None = None
        self.cancelled = False

    def _tell(self, **changes: Any) -> None:
        with self._cond:
            for name, value in changes.items():
                setattr(self, name, value)
            self._cond.notify_all()

    def wrote(self, shard: int) -> None:
        """Shard ``shard`` is written (or was, by an earlier run)."""
        with self._cond:
            self._written.add(shard)
            self._cond.notify_all()
        if self.cancelled:
            raise Cancelled(f"stage {self.label}: stopped")

    def last(self, shards: int) -> None:
        """Every shard is written: ``shards`` of them."""
        self._tell(_shards=shards)

    def committed(self, ref: Ref) -> None:
        self._tell(_ref=ref)

    def failed(self, error: BaseException) -> None:
        self._tell(_error=error)

    @property
    def ref(self) -> Ref | None:
        """The committed ref, once committed (never waits)."""
        return self._ref

    def wait(self) -> Ref:
        """The committed ref (waits for the commit; raises the node's error)."""
        with self._cond:
            self._cond.wait_for(lambda: self._ref is not None or self._error is not None)
            if self._error is not None:
                raise self._error
            return self._ref

    def shard(self, i: int) -> bool:
        """Whether the output has a shard ``i``: waits until it is written (True) or every shard is and there
        are fewer (False); raises the node's error."""
        with self._cond:
            self._cond.wait_for(lambda: i in self._written or self._shards is not None or self._error is not None)
            if i in self._written:
                return True
            if self._error is not None:
                raise self._error
            return False


def streamed(node: Node) -> str | None:
    """The input that ``node`` reads as it is written: its stage's ``stream_of``, for a streamed stage."""
    return node.stage.stream_of if node.stage.stream is not None else None


def resolved(node: Node) -> dict[str, list[Ref]]:
    """``node``'s inputs, each pending one committed (waited for) but those of the streamed input that are not
    committed yet."""
    name = streamed(node)
    return {k: [_settled(r, k == name) for r in refs] for k, refs in node.inputs.items()}


def _settled(ref: Ref, streaming: bool) -> Ref:
    if not isinstance(ref, Pending):
        return ref
    return ref if streaming and ref.output.ref is None else ref.output.wait()


def pending(refs: dict[str, list[Ref]]) -> bool:
    return any(isinstance(r, Pending) for rs in refs.values() for r in rs)


class Ahead:
    """``items`` taken on a thread, one ahead of the reader (the cut of a streamed stage's input waits for its
    upstream's shards): ``ready()`` says whether the next is there, so that the plan need not wait for it."""

    _END = object()

    def __init__(self, items: Iterable):
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._fill, items),
                                        daemon=True, name="bonforge-ahead")
        self._thread.start()

    def _fill(self, items: Iterable) -> None:
        try:
            for item in items:
                self._queue.put((item, None))
        except BaseException as e:  # handed to the reader, which raises it
            self._queue.put((self._END, e))
            return
        self._queue.put((self._END, None))

    def ready(self) -> bool:
        return not self._queue.empty()

    def __iter__(self) -> Iterator:
        while True:
            item, error = self._queue.get()
            if error is not None:
                raise error
            if item is self._END:
                return
            yield item
