"""A build without Prefect or Ray (each node through ``run_node`` in this process), or a ``gc``, run as a
child process that the crash tests kill: ``python crash_build.py STORE RECIPE [--set a.b=c ...]`` prints the
run record as JSON; ``python crash_build.py STORE --gc N`` collects."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from bonforge.config import load_recipe
from bonforge.engine.run import Run, execute
from bonforge.engine.shards import run_node
from bonforge.flows.build import dag
from bonforge.stage import Node, Ref
from bonforge.storage.store import StageStore


class LocalRun(Run):
    def __call__(self, node: Node) -> Ref:
        if self.store.exists(node.stage.name, node.key):
            return self._note(node, self.store.manifest(node.stage.name, node.key), True, 0.0)
        t0 = time.perf_counter()
        return self._note(node, run_node(self.store, node), False, time.perf_counter() - t0)


def main(argv: list[str]) -> None:
    store = StageStore(argv[0])
    if argv[1] == "--gc":
        from bonforge.storage.gc import collect

        print(json.dumps(collect(store, int(argv[2]))))
        return
    overrides = [v for k, v in zip(argv[2::2], argv[3::2]) if k == "--set"]
    recipe = load_recipe(argv[1], overrides)
    print(json.dumps(execute(dag, LocalRun(store, recipe), str(Path(argv[1]).parent), None, record_start=True)))


if __name__ == "__main__":
    main(sys.argv[1:])
