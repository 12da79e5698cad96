"""Compiled checker programs kept on disk, so that a later process (a Ray worker, the next build) does not
compile a problem's checker again (testlib's header makes each compile cost seconds of CPU).

A binary is filed under a key that the caller derives from everything that decides it: the checker's
content (its source, its files, the build's argv: ``testlib.digest``) and the sandbox image's id (the
compiler and the libraries it links against). The folder is ``<BONFORGE_HOME>/checker-cache`` when
``BONFORGE_HOME`` is set, else ``$XDG_CACHE_HOME/bonforge/checker`` (``runtime.folders``); it is
on the host and never mounted into a sandbox, so no program the sandbox runs can write it. Each file holds a
header with the binary's length and SHA-256: a short or corrupt file is ignored (and replaced by the next
compile); files are written to a temporary name and renamed, so a reader never sees half of one. The cache
is only a shortcut: a folder that cannot be read or written costs compiles, never a verdict, and deleting
it is always safe.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

from bonforge.runtime.folders import cache_folder

log = logging.getLogger("bonforge.sandbox")

MAGIC = b"bonforge-checker 1"


def root() -> Path:
    return cache_folder("checker")


def _path(key: str) -> Path:
    return root() / f"{key}.bin"


def load(key: str, max_bytes: int) -> bytes | None:
    """The binary filed under ``key``, or None (absent, unreadable, over ``max_bytes``, short or corrupt)."""
    try:
        with open(_path(key), "rb") as f:
            header = f.readline(200)
            data = f.read(max_bytes + 1)
    except OSError:
        return None
    parts = header.rstrip(b"\n").rsplit(b" ", 2)
    if len(parts) != 3 or parts[0] != MAGIC or not parts[1].isdigit() or int(parts[1]) != len(data):
        return None
    if len(data) > max_bytes or hashlib.sha256(data).hexdigest().encode() != parts[2]:
        return None
    return data


def store(key: str, data: bytes) -> None:
    """File ``data`` under ``key`` (temporary file + rename); a failure is logged, never raised."""
    folder = root()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(b"%s %d %s\n" % (MAGIC, len(data), hashlib.sha256(data).hexdigest().encode()) + data)
            os.replace(tmp, _path(key))
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        log.warning("compiled checker not kept in %s: %s", folder, e)
