"""Prefect's task results in a store that is not a local folder (imported only where Prefect runs).

Prefect's own remote block goes through fsspec's s3 implementation (s3fs); this one writes through the
store's location instead, so that results live beside the stages with the same settings and credentials.
Prefect takes only blocks saved on its server as result storage: ``saved`` saves one per store (it holds
the store's URL, no credentials) on the server the build talks to.
"""

from __future__ import annotations

import hashlib
import threading

from prefect.filesystems import WritableFileSystem
from prefect.settings import PREFECT_API_URL

from bonforge.storage.fs import open_location

_saved: dict[tuple[str, str], "StoreResults"] = {}
_saving = threading.Lock()  # stages of a streaming build start their Prefect tasks on threads of their own


class StoreResults(WritableFileSystem):
    """Result files under ``basepath`` (an ``s3://`` URI) of a bonforge store."""

    _block_type_name = "bonforge store results"

    basepath: str

    def _resolve_path(self, path: str) -> None:
        """No local base path: Prefect then keeps its storage keys as they are (``read_path`` and
        ``write_path`` place them under ``basepath``)."""
        return None

    def _where(self, path: str) -> str:
        return f"{self.basepath.rstrip('/')}/{path.lstrip('/')}"

    # Prefect calls these as ``read_path(path, _sync=True)`` or, from async code, as ``aread_path(path)``.
    def read_path(self, path: str, _sync: bool = True) -> bytes:
        return open_location(self.basepath).read_bytes(self._where(path))

    def write_path(self, path: str, content: bytes, _sync: bool = True) -> None:
        open_location(self.basepath).write_bytes(self._where(path), content)

    async def aread_path(self, path: str) -> bytes:
        return self.read_path(path)

    async def awrite_path(self, path: str, content: bytes) -> None:
        self.write_path(path, content)

def saved(basepath: str) -> StoreResults:
    """The block for ``basepath``, saved on the current Prefect server (once per server and process)."""
    server = str(PREFECT_API_URL.value())
    with _saving:  # one save: two at once both register the block's type, and the second is refused (409)
        if (server, basepath) not in _saved:
            block = StoreResults(basepath=basepath)
            block.save(f"store-{hashlib.sha256(basepath.encode()).hexdigest()[:16]}", overwrite=True)
            _saved[server, basepath] = block
        return _saved[server, basepath]
