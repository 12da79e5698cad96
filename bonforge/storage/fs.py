"""Where a store lives: a local folder or an S3 prefix, behind the few operations the store needs.

``open_location("path/to/store")`` is a local folder: files are written to a hidden temp name beside
their target, flushed and renamed, so that a crash never leaves a half-written file under a real name.
``open_location("s3://bucket/prefix")`` is an S3 prefix, reached through pyarrow's ``S3FileSystem`` with
the standard settings (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``). S3 has no rename, and needs none: an object becomes visible only once its upload
completes (a killed upload leaves no object), so every file is written straight to its key. The one
thing S3 adds is an exclusive create (``If-None-Match: *``), which pyarrow does not offer: it goes
through boto3. Any other URL scheme is an error, never a local folder named after it.

Paths are a location's own: ``pathlib.Path`` in a local folder, ``s3://bucket/key`` URIs on S3 (the form
DuckDB reads through the filesystem registered on ``location.duckdb()`` connections).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import socket
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator, Union
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from bonforge.errors import StoreError
from bonforge.keys import sha256_file  # noqa: F401  (the store's file digests)
from bonforge.runtime.processes import pid_alive

_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]+):")  # two letters at least: never a drive letter
_TEMP = re.compile(r"^\..+\.tmp-(?P<host>.+)-(?P<pid>\d+)$")  # what _temp_path names


def open_location(spec: Union[str, os.PathLike, "Location"]) -> "Location":
    """The location ``spec`` names: a local path, ``file://`` URL or ``s3://bucket/prefix``."""
    if isinstance(spec, (LocalDir, S3Prefix)):
        return spec
    text = os.fspath(spec)
    m = _URL.match(text)
    if m is None:
        return LocalDir(Path(text))
    scheme, rest = m["scheme"].lower(), text[m.end() :]
    if scheme == "s3" and rest.startswith("//"):
        return S3Prefix(text)
    if scheme == "file" and rest.startswith("//"):
        return LocalDir(Path(urlsplit(text).path))
    raise StoreError(
        f"store {text!r}: the scheme {m['scheme']!r} is not supported; use a local folder or s3://bucket/prefix"
    )


# -- local files ------------------------------------------------------------------------------------


def _temp_path(path: Path) -> Path:
    """A hidden temp name beside ``path``, naming the writer (host and pid) so that the leftovers of a
    crashed writer can be told from a live one's."""
    return path.with_name(f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}")


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[Path]:
    """The temp path to write ``path`` through; renamed into place when the block succeeds, removed when it
    fails. A full disk is a ``StoreError`` naming the file (one clear line, no traceback)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and (e.errno == errno.ENOSPC or "No space left" in str(e)):
            raise StoreError(f"cannot write {path}: no space left on the device") from None
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    with _writing(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode()


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, json_bytes(obj))


def write_parquet(table: pa.Table, where, filesystem: pafs.FileSystem | None = None,
                  notes: dict[bytes, bytes] | None = None) -> None:
    """Parquet (zstd). ``notes``: key-value metadata of the file alone (read by ``pq.read_metadata``), not
    copied into the Arrow schema that pyarrow stores in the file (nor so into the tables read from it)."""
    with pq.ParquetWriter(where, table.schema, filesystem=filesystem, compression="zstd") as w:
        w.write_table(table)
        if notes:
            w.add_key_value_metadata(notes)


def write_parquet_atomic(table: pa.Table, path: Path, notes: dict[bytes, bytes] | None = None) -> None:
    with _writing(path) as tmp:
        write_parquet(table, tmp, notes=notes)


class LocalDir:
    """A store in a local (or POSIX-mounted) folder."""

    remote = False

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self.url = str(self.root)
        self.fs = pafs.LocalFileSystem()

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def key(self, path: Path) -> str:
        return str(path)

    def is_file(self, path: Path) -> bool:
        return Path(path).is_file()

    def read_bytes(self, path: Path) -> bytes:
        return Path(path).read_bytes()

    def names(self, folder: Path) -> list[str]:
        folder = Path(folder)
        return [p.name for p in folder.iterdir()] if folder.is_dir() else []

    def write_bytes(self, path: Path, data: bytes) -> None:
        atomic_write_bytes(Path(path), data)

    def write_parquet(self, table: pa.Table, path: Path, notes: dict[bytes, bytes] | None = None) -> None:
        write_parquet_atomic(table, Path(path), notes)

    def remove(self, path: Path) -> None:
        Path(path).unlink(missing_ok=True)

    def remove_dead_temps(self, folder: Path) -> None:
        """Remove temp files in ``folder`` left by writers on this host that no longer run."""
        host = socket.gethostname()
        for name in self.names(folder):
            m = _TEMP.match(name)
            if not m or m["host"] != host:
                continue
            if not pid_alive(int(m["pid"])):
                (Path(folder) / name).unlink(missing_ok=True)

    def duckdb(self):
        import duckdb

        return duckdb.connect()


class S3Prefix:
    """A store under ``s3://bucket/prefix`` (any S3-compatible server: ``AWS_ENDPOINT_URL``)."""

    remote = True

    def __init__(self, url: str):
        parts = urlsplit(url)
        if not parts.netloc:
            raise StoreError(f"store {url!r}: no bucket; use s3://bucket/prefix")
        self.bucket = parts.netloc
        self.url = f"s3://{parts.netloc}/{parts.path.strip('/')}".rstrip("/")
        self.root = self.url

    # Built on first use, from this process's environment: a Ray worker on another node gets a store from
    # the URL alone and connects with its own node's settings and credentials.
    @cached_property
    def fs(self) -> pafs.S3FileSystem:
        kwargs: dict[str, Any] = {"region": _region()}
        if endpoint := _endpoint():
            e = urlsplit(endpoint)
            kwargs.update(endpoint_override=e.netloc, scheme=e.scheme or "https")
        return pafs.S3FileSystem(**kwargs)

    @cached_property
    def _client(self):
        try:
            import boto3
        except ImportError:
            raise StoreError("stores on S3 need boto3: pip install 'bonforge[s3]'") from None

        return boto3.client("s3", endpoint_url=_endpoint(), region_name=_region())

    def path(self, *parts: str) -> str:
        return "/".join([self.url, *parts])

    def key(self, path: str) -> str:
        """The path inside the filesystem: ``bucket/key``."""
        return str(path).removeprefix("s3://")

    def is_file(self, path: str) -> bool:
        return self.fs.get_file_info(self.key(path)).type == pafs.FileType.File

    def read_bytes(self, path: str) -> bytes:
        with self.fs.open_input_stream(self.key(path)) as f:
            return f.read()

    def names(self, folder: str) -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(self.key(folder), allow_not_found=True))
        return [i.base_name for i in infos]

    def write_bytes(self, path: str, data: bytes) -> None:
        with self.fs.open_output_stream(self.key(path)) as f:
            f.write(data)

    def write_parquet(self, table: pa.Table, path: str, notes: dict[bytes, bytes] | None = None) -> None:
        write_parquet(table, self.key(path), self.fs, notes)

    def remove(self, path: str) -> None:
        try:
            self.fs.delete_file(self.key(path))
        except FileNotFoundError:
            pass

    def remove_dead_temps(self, folder: str) -> None:
        """Nothing to do: S3 writes leave no temp objects (an unfinished upload is no object)."""

    def create(self, path: str, data: bytes) -> bool:
        """Write ``path`` only if no object has that key (one conditional PUT); False when one has."""
        from botocore.exceptions import ClientError

        bucket, _, key = self.key(path).partition("/")
        for _ in range(5):
            try:
                self._client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
                return True
            except ClientError as e:
                code = e.response.get("Error", {}).get("Code")
                if code == "PreconditionFailed":
                    return False
                if code != "ConditionalRequestConflict":  # a concurrent create in flight: ask again
                    raise
        raise StoreError(f"{path}: conditional writes kept conflicting")

    def duckdb(self):
        """A DuckDB connection that reads ``s3://`` paths through this location's filesystem."""
        import duckdb
        from fsspec.implementations.arrow import ArrowFSWrapper

        con = duckdb.connect()
        con.register_filesystem(ArrowFSWrapper(self.fs))
        return con


Location = Union[LocalDir, S3Prefix]


def _endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def _region() -> str | None:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
