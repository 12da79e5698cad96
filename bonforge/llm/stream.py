"""Sampling as requests come (early stopping without rounds, ``bonforge.flows.early``): ``open_stream(engine, out)``
gives a stream whose ``put(requests)`` adds requests at any time and which puts ``(request, completions)`` in
``out`` as each request's samples are all done, or an exception (then it stops). ``close()`` ends it.

An engine with a continuous path of its own has a ``stream(out)`` method (``vllm``: requests join the running
batch; ``openai``: each sample is sent as soon as the window has room). Any other engine is driven by
``Calls``: one thread takes every request put and not yet taken into one ``generate`` call at a time (what a
local model needs)."""

from __future__ import annotations

import queue
import threading
from typing import Any

from bonforge.llm.base import Request


def open_stream(engine: Any, out: queue.Queue) -> Any:
    engine.start()
    if hasattr(engine, "stream"):
        return engine.stream(out)
    return Calls(engine, out)


class Calls:
    """A stream over ``generate``: one call at a time, on every request waiting when the last call returns."""

    def __init__(self, engine: Any, out: queue.Queue):
        self.engine, self.out = engine, out
        self.waiting: list[Request] = []
        self.ready = threading.Condition()
        self.stopped = False
        self.thread = threading.Thread(target=self._run, name="stream-calls", daemon=True)
        self.thread.start()

    def put(self, requests: list[Request]) -> None:
        with self.ready:
            self.waiting += requests
            self.ready.notify_all()

    def close(self) -> None:
        with self.ready:
            self.stopped = True
            self.ready.notify_all()
        self.thread.join()

    def _run(self) -> None:
        while True:
            with self.ready:
                while not self.waiting and not self.stopped:
                    self.ready.wait()
                if self.stopped:
                    return
                batch, self.waiting = self.waiting, []
            try:
                results = self.engine.generate(batch)
            except BaseException as e:  # the reader raises it; this stream takes nothing more
                with self.ready:
                    self.stopped = True
                self.out.put(e)
                return
            for r, comps in zip(batch, results):
                self.out.put((r, comps))
