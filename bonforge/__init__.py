"""bonforge: a data factory for Best-of-N training data.

Importing the package is inert: no Ray, Prefect, Docker or GPU is touched until a command runs. From Python,
``bonforge.build(recipe, store=..., overrides=...)`` builds a recipe, prints its summary and returns its run
record, and ``bonforge.open(store)`` reads a store's runs, stages (as Arrow tables) and datasets (``bonforge.api``).
"""

from __future__ import annotations

__version__ = "0.1.0"


def build(recipe, store=None, overrides=None, fresh: bool = False, recipe_dir=None, show: bool = True):
    """Build a recipe (a YAML file or its mapping), print what ``bonforge run`` ends with (``show``) and return
    the run record (``bonforge.api.build``)."""
    from bonforge.api import build as build_recipe

    return build_recipe(recipe, store, overrides, fresh, recipe_dir, show)


def open(store=None):  # bonforge.open, as io.open
    """A store for reading: runs, SQL and stages as Arrow tables, datasets (``bonforge.api.open``)."""
    from bonforge.api import open as open_store

    return open_store(store)
