"""A source on S3 (``source: {path: s3://bucket/key}``): keyed by the object's ETag and size, read from a local
copy made once per ETag.

``head`` asks for the ETag and size (one request: an unchanged 10 GB object costs no download to key); ``fetch``
downloads the object into the data cache under its ETag, on the condition that the ETag is still the one the key
holds (``If-Match``), to a temporary name renamed into place. The standard AWS settings apply
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``); boto3 is the ``s3``
extra. Any failure is one ``FetchError`` naming the object.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from bonforge.errors import FetchError


def is_s3(path: str) -> bool:
    return path.startswith("s3://")


def _parts(url: str) -> tuple[str, str]:
    bucket, _, key = url.removeprefix("s3://").partition("/")
    if not bucket or not key or key.endswith("/"):
        raise FetchError(f"{url}: an S3 source is one object, s3://bucket/key")
    return bucket, key


def _client():
    try:
        import boto3
    except ImportError:
        raise FetchError("sources on S3 need boto3: pip install 'bonforge[s3]'") from None
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
    return boto3.client("s3", endpoint_url=endpoint, region_name=region)


def _failed(url: str, e: Exception) -> FetchError:
    return FetchError(f"{url}: cannot read the object ({type(e).__name__}: {' '.join(str(e).split())[:300]})")


def head(url: str) -> tuple[str, int]:
    """The object's ETag (without quotes) and size."""
    bucket, key = _parts(url)
    try:
        meta = _client().head_object(Bucket=bucket, Key=key)
    except Exception as e:  # botocore's ClientError, EndpointConnectionError, NoCredentialsError, ...
        raise _failed(url, e) from None
    return meta["ETag"].strip('"'), int(meta["ContentLength"])


def fetch(url: str, etag: str, cache: Path) -> Path:
    """A local copy of the object as it is under ``etag``: ``cache/s3/<bucket>/<key>/<etag>/<file name>``."""
    bucket, key = _parts(url)
    dest = cache / "s3" / bucket / key / re.sub(r"[^A-Za-z0-9_-]", "_", etag) / Path(key).name
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part-{os.getpid()}")
    try:
        body = _client().get_object(Bucket=bucket, Key=key, IfMatch=f'"{etag}"')["Body"]
        with open(tmp, "wb") as f:
            for chunk in iter(lambda: body.read(1 << 20), b""):
                f.write(chunk)
    except Exception as e:
        tmp.unlink(missing_ok=True)
        raise _failed(url, e) from None
    os.replace(tmp, dest)
    return dest
