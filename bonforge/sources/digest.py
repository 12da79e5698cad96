"""Content digests of the local files and folders a recipe reads, so that stage keys follow the bytes, not
the names.

A file's digest is its sha256 (the same value a recipe's ``sha256`` states for a download, so a URL source
and a local copy of the same bytes key alike). Reading a large file on every build would cost as much as
the build, so each digest is cached by what ``stat`` says of the file: real path, device, inode, size,
mtime and ctime (nanoseconds). An unchanged file costs one ``stat`` and one look-up; a file edited in place
(another mtime, size or ctime), or replaced by another file (another inode), is read again. A folder's
digest is the sha256 of its files' relative paths and digests, in sorted order, links to folders followed as
the loaders follow them (a link back into a folder above it enters as the link, not walked again).

The cache is one SQLite file (``BONFORGE_DIGESTS``, default ``digests.sqlite`` in ``<BONFORGE_HOME>/digest-cache``
or ``~/.cache/bonforge/digest``: ``runtime.folders``): safe under concurrent builds (SQLite's locking; each write is
one statement), and never a reason to fail: a cache that cannot be opened or written is skipped and the
file is read. A file that changes while it is read, or changed in the last ``RACY_S`` seconds (a rewrite in the
same tick of a coarse filesystem clock would keep its stat), gets its digest but no cache entry.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from pathlib import Path

from bonforge.errors import DataError
from bonforge.runtime.folders import cache_folder

_BLOCK = 1 << 20
# A file changed within this many seconds is read again next time rather than cached: a filesystem whose clock
# ticks coarsely (a network mount, FAT: 1-2 s) could give a same-size rewrite in the same tick the same stat.
RACY_S = 2.0


def cache_path() -> Path:
    if os.environ.get("BONFORGE_DIGESTS"):
        return Path(os.environ["BONFORGE_DIGESTS"])
    return cache_folder("digest") / "digests.sqlite"


def _signature(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class _Cache:
    """The digest table; every failure of SQLite (read-only home, a locked file past the timeout, a
    corrupt database) makes it a no-op."""

    def __init__(self, path: Path):
        self.con: sqlite3.Connection | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(path, timeout=30, isolation_level=None)
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("CREATE TABLE IF NOT EXISTS digests (path TEXT PRIMARY KEY, dev INTEGER, ino INTEGER, "
                        "size INTEGER, mtime_ns INTEGER, ctime_ns INTEGER, sha256 TEXT)")
            self.con = con
        except (sqlite3.Error, OSError):
            self.con = None

    def get(self, path: str, sig: tuple) -> str | None:
        if self.con is None:
            return None
        try:
            row = self.con.execute("SELECT dev, ino, size, mtime_ns, ctime_ns, sha256 FROM digests WHERE path = ?",
                                   (path,)).fetchone()  # fmt: skip
        except sqlite3.Error:
            return None
        return row[5] if row is not None and tuple(row[:5]) == sig else None

    def put(self, path: str, sig: tuple, digest: str) -> None:
        if self.con is None:
            return
        try:
            self.con.execute("INSERT OR REPLACE INTO digests VALUES (?, ?, ?, ?, ?, ?, ?)", (path, *sig, digest))
        except sqlite3.Error:
            pass

    def close(self) -> None:
        if self.con is not None:
            self.con.close()


def _read_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


def _file_digest(path: str, cache: _Cache) -> str:
    real = os.path.realpath(path)
    sig = _signature(os.stat(real))
    if (hit := cache.get(real, sig)) is not None:
        return hit
    digest = _read_digest(real)
    settled = time.time_ns() - max(sig[3], sig[4]) > RACY_S * 1e9
    if settled and _signature(os.stat(real)) == sig:  # unchanged while read: the digest is the file's
        cache.put(real, sig, digest)
    return digest


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes, from the cache when the file is as it was."""
    cache = _Cache(cache_path())
    try:
        return _file_digest(str(path), cache)
    finally:
        cache.close()


def content_key(path: str | Path) -> dict[str, str]:
    """What a stage key holds of a local file (``{"sha256": ...}``) or folder (``{"tree_sha256": ...}``):
    its content, whatever the spelling of its path."""
    path = Path(path)
    cache = _Cache(cache_path())
    try:
        if not path.is_dir():
            return {"sha256": _file_digest(str(path), cache)}
        h = hashlib.sha256()
        for rel, file in _tree(os.path.realpath(path)):
            if file is None:  # a link back into a folder above it: its content is in the key already
                h.update(f"{len(rel)}:{rel}\n".encode())
            else:
                h.update(f"{len(rel)}:{rel}{_file_digest(file, cache)}\n".encode())
        return {"tree_sha256": h.hexdigest()}
    finally:
        cache.close()


MAX_TREE_FILES = 1_000_000  # a folder (links followed) holding more is refused: a link to / would walk the disk


def _tree(root: str) -> list[tuple[str, str | None]]:
    """The files of a folder as the loaders reach them, links to folders followed (a shard behind a linked
    folder is read, so it is keyed): ``(relative path, path)`` sorted by relative path. A link into a folder
    above it (a loop) is ``("<relative path>/ -> <n> up", None)``, never walked into."""
    out: list[tuple[str, str | None]] = []
    todo = [(root, "", (root,))]
    while todo:
        folder, rel, above = todo.pop()
        try:
            with os.scandir(folder) as entries:
                entries = list(entries)
        except OSError:  # unreadable: the loader cannot read it either
            continue
        for e in entries:
            name = f"{rel}{e.name}"
            if os.path.isdir(e.path):  # through a link too (a link that leads nowhere is neither)
                real = os.path.realpath(e.path)
                if real in above:
                    out.append((f"{name}/ -> {len(above) - 1 - above.index(real)} up", None))
                else:
                    todo.append((e.path, f"{name}/", (*above, real)))
            elif os.path.isfile(e.path):
                out.append((name, e.path))
            if len(out) > MAX_TREE_FILES:
                raise DataError(f"more than {MAX_TREE_FILES:,} files in this folder (links to folders followed): "
                                "point the source at the folder the tables are in", root)  # fmt: skip
    return sorted(out)
