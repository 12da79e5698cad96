"""Sampling as requests come (early stopping without rounds, ``bonforge.flows.early``): ``open_stream(engine, out)``
gives a stream whose ``put(requests)`` adds requests at any time and which puts ``(request, completions)`` in
``out`` as each request's samples are all done, or an exception (then it stops). ``close()`` ends it.

An engine with a continuous path of its own has a ``stream(out)`` method (``vllm``: requests join the running
batch). Any other engine is driven by ``Calls``: ``workers`` threads, each taking every request put and not
yet taken into one ``generate`` call (one thread: one call at a time, what a local model needs; an endpoint's
``max_concurrency``: its window stays full, each request on its own as soon as a slot is free)."""

from __future__ import annotations

import queue
import threading
from typing import Any

from bonforge.llm.base import Request


def open_stream(engine: Any, out: queue.Queue) -> Any:
    engine.start()
    if hasattr(engine, "stream"):
        return engine.stream(out)
    return Calls(engine, out, getattr(getattr(engine, "teacher", None), "max_concurrency", 1))


class Calls:
    """A stream over ``generate``: ``workers`` threads call it, each on the requests waiting when it is free
    (one request each when there are several workers: a slow request holds no other back)."""

    def __init__(self, engine: Any, out: queue.Queue, workers: int):
        self.engine, self.out, self.each = engine, out, workers > 1
        self.waiting: list[Request] = []
        self.ready = threading.Condition()
        self.stopped = False
        self.threads = [threading.Thread(target=self._run, name=f"stream-{i}", daemon=True) for i in range(workers)]
        for t in self.threads:
            t.start()

    def put(self, requests: list[Request]) -> None:
        with self.ready:
            self.waiting += requests
            self.ready.notify_all()

    def close(self) -> None:
        with self.ready:
            self.stopped = True
            self.ready.notify_all()
        for t in self.threads:
            t.join()

    def _run(self) -> None:
        while True:
            with self.ready:
                while not self.waiting and not self.stopped:
                    self.ready.wait()
                if self.stopped:
                    return
                take = 1 if self.each else len(self.waiting)
                batch, self.waiting = self.waiting[:take], self.waiting[take:]
            try:
                results = self.engine.generate(batch)
            except BaseException as e:  # the reader raises it; this stream takes nothing more
                with self.ready:
                    self.stopped = True
                self.out.put(e)
                return
            for r, comps in zip(batch, results):
                self.out.put((r, comps))
