"""Obtaining public files: a mirror directory, a download cache, or a URL checked by sha256.

Resolution order for a ``DataSource(path, url, sha256)``:

1. ``$BONFORGE_DATA/<path>`` — a local mirror with the same relative layout (tests and CI use one);
2. ``<path>`` as a local file or directory (absolute, or relative to the recipe's folder or the CWD);
3. ``$BONFORGE_CACHE/<path>`` (default ``~/.cache/bonforge/data``), filled once by downloading ``url``.

A ``path`` of the form ``s3://bucket/key`` is an S3 object, copied into the cache once per ETag
(``bonforge.sources.s3_objects``).

A download is written to a temporary name, checked against ``sha256`` and only then renamed into place.

``content_key`` is what a stage key holds of a source: the recipe's ``sha256`` where it states one, an S3
object's ETag and size, else the content of the file or folder it resolves to (``bonforge.sources.digest``),
never its path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from bonforge.config import DataSource
from bonforge.errors import DataError, FetchError
from bonforge.keys import sha256_file
from bonforge.sources import s3_objects
from bonforge.sources.digest import content_key as _local_key, file_sha256


Beside = Callable[[Path], list[Path]]


def cache_dir() -> Path:
    return Path(os.environ.get("BONFORGE_CACHE", Path.home() / ".cache" / "bonforge" / "data"))


def _checked(path: Path, src: DataSource) -> Path:
    if src.sha256 and path.is_file() and file_sha256(path) != src.sha256:
        raise FetchError(f"{path}: sha256 does not match the recipe's {src.sha256} (a different file?)")
    return path


def resolve(src: DataSource, base: Path | None = None) -> Path:
    """Return a local path for ``src``, downloading it into the cache when needed."""
    if s3_objects.is_s3(src.path):
        etag, _ = s3_objects.head(src.path)
        return _checked(s3_objects.fetch(src.path, etag, cache_dir()), src)
    mirror = os.environ.get("BONFORGE_DATA")
    if mirror and (Path(mirror) / src.path).exists():
        return _checked(Path(mirror) / src.path, src)
    local = Path(src.path) if Path(src.path).is_absolute() else (base or Path.cwd()) / src.path
    if local.exists():
        return _checked(local, src)
    cached = cache_dir() / src.path
    if cached.exists():
        return _checked(cached, src)
    if not src.url:
        if Path(src.path).is_absolute():
            raise FetchError(f"data file {src.path} does not exist")
        raise FetchError(
            f"data file {src.path!r} not found: not at {local} (a relative path is read from the recipe's folder), "
            f"no mirror has it (BONFORGE_DATA={mirror or 'unset'}) and the recipe gives no url; put the file "
            f"there, name it by its absolute path, or set BONFORGE_DATA to a directory holding {src.path}"
        )
    return _download(src, cached)


def content_key(src: DataSource, base: Path | None = None, beside: Beside | None = None) -> dict:
    """A source as a stage key holds it: the same bytes under any path (``problems.jsonl``, ``./problems.jsonl``,
    an absolute path, a mirror or a download) give the same key, and a file edited in place another one.
    ``beside(path)``: the files or folders outside the source that its loader reads too (a problem package's
    ``../common``), keyed beside it by their content."""
    if src.sha256:  # every copy that is read is checked against it
        return {"sha256": src.sha256}
    if s3_objects.is_s3(src.path):
        etag, size = s3_objects.head(src.path)
        return {"s3_etag": etag, "size": str(size)}
    path = resolve(src, base)
    key = _local_key(path)
    if beside is not None and (more := beside(path)):
        key = dict(key, beside=[_local_key(p) for p in more])
    return key


def _download(src: DataSource, dest: Path) -> Path:
    import httpx

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part-{os.getpid()}")
    try:
        with httpx.stream("GET", src.url, follow_redirects=True, timeout=60) as r:
            r.raise_for_status()
            with open(tmp, "wb") as f:
                for chunk in r.iter_bytes(1 << 20):
                    f.write(chunk)
    except httpx.HTTPError as e:
        tmp.unlink(missing_ok=True)
        raise FetchError(
            f"could not download {src.url} ({e.__class__.__name__}: {e}). Offline? Set BONFORGE_DATA to a "
            f"directory that holds {src.path}, or put the file at {dest}"
        ) from None
    if src.sha256 and (got := sha256_file(tmp)) != src.sha256:
        tmp.unlink(missing_ok=True)
        raise FetchError(f"{src.url}: sha256 {got} does not match the recipe's {src.sha256}")
    os.replace(tmp, dest)
    return dest


def keyed(model, content: dict[str, str]) -> dict:
    """The key config of a recipe section that names a ``source`` (problems, a pool teacher, a benchmark),
    with the source's ``content_key`` in place of its path, url and checksum."""
    return {**model.key_config(), "source": content}


def unchanged(src: DataSource, base: Path | None, content: dict, beside: Beside | None = None) -> None:
    """Raise ``DataError`` when the source no longer holds the content its stage was keyed by (edited while
    the build ran): the output would not be the key's."""
    if content_key(src, base, beside) != content:
        raise DataError("the file changed while the build was running; run it again", src.path)
