"""The build's stages, one module each, ending in a ``STAGE`` declaration and its ``node()``.

``registry()`` collects the declarations: what ``bonforge show``, ``bonforge sql --help``, the report and the
viewer know of the stages comes from there alone.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

import pyarrow as pa


@cache
def registry() -> dict[str, pa.Schema]:
    """Every stage's name and output schema, from the declarations in this package's modules (several
    declarations may compute one stage, e.g. ``candidates`` sampled or imported: they share its schema)."""
    from bonforge.stage import Stage

    found: dict[str, pa.Schema] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for stage in (v for v in vars(module).values() if isinstance(v, Stage)):
            if stage.schema is None:
                raise TypeError(f"stage {stage.name!r} in {module.__name__} declares no schema")
            if found.setdefault(stage.name, stage.schema) != stage.schema:
                raise TypeError(f"stage {stage.name!r}: two declarations with different schemas")
    return dict(sorted(found.items()))
