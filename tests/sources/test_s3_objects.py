"""Sources on S3 (a real S3 server, SeaweedFS): keyed by the object's ETag and size without downloading it,
copied once per ETag, and an object replaced under the same key is a new input; a missing object is one
error naming it."""

from __future__ import annotations

import json

import boto3
import pytest
from s3 import BUCKET

from bonforge.config import DataSource, Recipe
from bonforge.errors import FetchError
from bonforge.sources import data, s3_objects
from bonforge.stages import load


def put(key: str, rows: list[dict]) -> None:
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    boto3.client("s3").put_object(Bucket=BUCKET, Key=key, Body=body)


def recipe(url: str) -> Recipe:
    return Recipe.model_validate({"name": "r", "problems": {"name": "toy", "source": {"path": url}},
                                  "teachers": [{"name": "p", "engine": "pool", "source": {"path": url}}],
                                  "export": {"name": "d"}})  # fmt: skip


def test_an_s3_object_is_keyed_by_its_etag_and_read_from_one_copy(s3_env, tmp_path, monkeypatch):
    monkeypatch.setenv("BONFORGE_CACHE", str(tmp_path / "cache"))
    url = f"s3://{BUCKET}/sources/problems.jsonl"
    put("sources/problems.jsonl", [{"question": "What is 1 + 1?", "answer": "2"}])
    gets = []
    real = s3_objects.fetch
    monkeypatch.setattr(s3_objects, "fetch", lambda *a: gets.append(a) or real(*a))

    src = DataSource(path=url)
    key = data.content_key(src)
    assert set(key) == {"s3_etag", "size"} and key["size"] == str(len(json.dumps({"question": "What is 1 + 1?",
                                                                                   "answer": "2"})) + 1)
    assert gets == []  # keyed without a download
    first = load.node(recipe(url), tmp_path)
    rows = first.stage.compute(None, **first.params.compute_args())
    assert rows.column("answer").to_pylist() == ["2"]
    path = data.resolve(src)
    assert data.resolve(src) == path and path.read_bytes().startswith(b'{"question"')  # one copy per ETag

    put("sources/problems.jsonl", [{"question": "What is 1 + 1?", "answer": "2"},
                                   {"question": "What is 2 + 2?", "answer": "4"}])  # replaced, same key
    grown = load.node(recipe(url), tmp_path)
    assert grown.key != first.key and data.content_key(src) != key
    assert grown.stage.compute(None, **grown.params.compute_args()).num_rows == 2
    with pytest.raises(Exception, match="changed while the build was running"):
        first.stage.compute(None, **first.params.compute_args())  # keyed by the old object


def test_a_missing_object_is_one_error(s3_env):
    with pytest.raises(FetchError, match=rf"s3://{BUCKET}/nowhere.jsonl: cannot read the object \(ClientError"):
        data.content_key(DataSource(path=f"s3://{BUCKET}/nowhere.jsonl"))
    with pytest.raises(FetchError, match="an S3 source is one object"):
        data.content_key(DataSource(path=f"s3://{BUCKET}/"))
