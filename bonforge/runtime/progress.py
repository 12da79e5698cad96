"""A rich progress bar per stage (quiet when output is not a terminal or BONFORGE_QUIET is set)."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable, Iterator


@contextlib.contextmanager
def stage_progress(label: str, total: int) -> Iterator[Callable[[int], None]]:
    if os.environ.get("BONFORGE_QUIET") or not sys.stderr.isatty():
        yield lambda n: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), transient=False) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)
