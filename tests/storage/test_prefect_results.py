"""Prefect's task results in a remote store (``bonforge.storage.prefect_results``): the block naming the store is
saved on the Prefect server once per server and store, even when the stages of a streaming build ask for it
on their threads at once (two saves at once both registered the block's type, and the server refused one)."""

from __future__ import annotations

import threading
import time

from bonforge.storage import prefect_results
from bonforge.storage.prefect_results import StoreResults, saved


def test_stages_asking_at_once_save_the_block_once(monkeypatch):
    saves: list[str] = []

    def save(self, name: str, overwrite: bool = False) -> None:
        saves.append(name)
        time.sleep(0.2)  # a server's round trip: the others ask meanwhile

    monkeypatch.setattr(StoreResults, "save", save)
    monkeypatch.setattr(prefect_results, "_saved", {})
    start, got = threading.Barrier(4), []

    def ask(basepath: str) -> None:
        start.wait()
        got.append(saved(basepath))

    threads = [threading.Thread(target=ask, args=(f"s3://bucket/{name}",)) for name in ("a", "a", "a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(saves) == 2 and len(set(saves)) == 2  # one per store
    assert len({id(b) for b in got if b.basepath == "s3://bucket/a"}) == 1
