"""A build's export tells its progress as each part of the dataset is written (a million problems' export
takes a minute or more: it must not sit silent), and publishes the same dataset."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pyarrow as pa

from bonforge.config import load_recipe
from bonforge.engine import run as run_module
from bonforge.engine.run import Run
from bonforge.storage.store import StageStore

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "gsm8k-genselect.yaml"


def test_the_export_moves_part_by_part(tmp_path, monkeypatch):
    events: list[tuple[str, int]] = []

    @contextlib.contextmanager
    def progress(label, total, done=0):
        events.append(("start " + label, done))
        yield lambda n: events.append(("rows", n))
        events.append(("end", 0))

    def parts():
        for i in range(4):
            events.append(("part", i))
            yield {"plain": pa.table({"x": list(range(10 * i, 10 * i + 10))}), "other": pa.table({"y": [i] * 3})}

    monkeypatch.setattr(run_module, "stage_progress", progress)
    man = Run(StageStore(tmp_path), load_recipe(RECIPE)).publish("d", parts())
    assert events == [("start export[d]", 0), ("part", 0), ("rows", 10), ("part", 1), ("rows", 10), ("part", 2),
                      ("rows", 10), ("part", 3), ("rows", 10), ("end", 0)]
    assert man["files"]["plain/train.parquet"]["rows"] == 40 and man["files"]["other/train.parquet"]["rows"] == 12
