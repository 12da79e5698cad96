"""The viewer's ``/api/diff`` (the #diff page's data): what `bonforge diff --json` returns, over a store of two
runs written directly; unknown or ambiguous runs are a 404, a bad limit a 400, each one JSON line."""

from __future__ import annotations

import diff_store
import pytest
from viewer_helpers import page_client

from bonforge.viewer.app import create_app


@pytest.fixture
def client(tmp_path):
    store = diff_store.two_runs(tmp_path / "store")
    with page_client(create_app(store, copies=False)) as c:
        yield c


def test_the_diff_of_two_runs(client):
    res = client.get("/api/diff", params={"a": "20260101-a", "b": "20260101-bbbbbb", "limit": 2})
    assert res.status_code == 200, res.text
    out = res.json()
    assert (out["a"]["run_id"], out["flipped"], len(out["flips"])) == ("20260101-aaaaaa", 3, 2)
    assert out["flips"][0]["problem_id"] == diff_store.HOSTILE and out["problems"]["kept_to_dropped"] == 2


@pytest.mark.parametrize(("params", "status", "words"), [
    ({"a": "20260101-", "b": "20260101-b"}, 404, "is ambiguous: 2 runs start with it"),
    ({"a": "nope'; --", "b": "20260101-b"}, 404, "no run \"nope'; --\""),
    ({"a": "20260101-a"}, 400, "parameter 'b' is required"),
    ({"a": "20260101-a", "b": "20260101-b", "limit": "-1"}, 400, "parameter 'limit' must be an integer"),
    ({"a": "20260101-a", "b": "20260101-b", "teacher": "zz"}, 400, "has no verdicts of teacher 'zz'"),
])
def test_bad_requests_are_one_line_each(client, params, status, words):
    res = client.get("/api/diff", params=params)
    assert res.status_code == status, res.text
    message = res.json()["error"]
    assert words in message and "\n" not in message and "Traceback" not in message
