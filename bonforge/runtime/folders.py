"""Where bonforge keeps its per-user files. ``BONFORGE_HOME``, when set, holds them all (a test's own home, two
set-ups on one account): the records of `bonforge up`'s services in it, each cache in ``<name>-cache/``.
Unset, state lives in ``$XDG_CONFIG_HOME/bonforge`` and caches in ``$XDG_CACHE_HOME/bonforge/<name>``
(``~/.config``, ``~/.cache`` by default)."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """Per-user state (the warm services' records): ``BONFORGE_HOME``, else ``$XDG_CONFIG_HOME/bonforge``."""
    if os.environ.get("BONFORGE_HOME"):
        return Path(os.environ["BONFORGE_HOME"])
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "bonforge"


def cache_folder(name: str) -> Path:
    """The folder of the cache ``name`` (files that can be rebuilt: compiled checkers, the viewer's sorted
    copies, file digests): ``<BONFORGE_HOME>/<name>-cache``, else ``$XDG_CACHE_HOME/bonforge/<name>``."""
    if os.environ.get("BONFORGE_HOME"):
        return Path(os.environ["BONFORGE_HOME"]) / f"{name}-cache"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bonforge" / name
