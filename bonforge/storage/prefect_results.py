"""Prefect's task results in a store that is not a local folder (imported only where Prefect runs).

Prefect's own remote block goes through fsspec's s3 implementation (s3fs); this one writes through the
store's location instead, so that results live beside the stages with the same settings and credentials.
"""

from __future__ import annotations

from prefect.filesystems import WritableFileSystem

from bonforge.storage.fs import open_location


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

    async def read_path(self, path: str) -> bytes:
        return open_location(self.basepath).read_bytes(self._where(path))

    async def write_path(self, path: str, content: bytes) -> None:
        open_location(self.basepath).write_bytes(self._where(path), content)
