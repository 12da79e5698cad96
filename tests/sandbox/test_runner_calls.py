"""Whether ``1`` passes where ``[1]`` is expected is a property of the source format: APPS (and TACO,
which shares its files) accept either, as the APPS harness does; every other format compares strictly."""

from __future__ import annotations

import json

import pytest

from bonforge.judging.code_verdict import judge_outcome
from bonforge.judging.spec import parse_spec
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.codec import encode_value
from bonforge.sources.spec_formats import Where, to_spec

W = Where("t.jsonl", "line 1")
APPS = {"inputs": [[1]], "outputs": [[1]], "fn_name": "f"}
LCB = [{"input": "1", "output": "[1]", "testtype": "functional"}]
OWN = {"kind": "call", "fn_name": "f", "tests": [{"args": [1], "output": [1]}]}


@pytest.mark.parametrize(("fmt", "value", "wrapped"), [
    ("apps", APPS, True),
    ("auto", json.dumps(APPS), True),  # detected as APPS
    ("livecodebench", LCB, False),
    ("bonforge", OWN, False),
    ("bonforge", {**OWN, "wrapped_outputs": True}, True),  # our own spec may say so
])  # fmt: skip
def test_each_format_says_whether_values_unwrap(fmt, value, wrapped):
    spec = to_spec({"tests": value}, fmt, W, fn_name="f")
    assert spec.wrapped_outputs is wrapped
    assert parse_spec(spec.to_json(), "p").wrapped_outputs is wrapped  # it survives the problems table
    cfg = CodeVerifyConfig()
    for returned, passes in ((1, wrapped), ([1], True), (2, False)):
        outcome = {"results": [{"status": "ok", "value": json.dumps(encode_value(returned)), "wall_s": 0.0}]}
        assert judge_outcome(spec, outcome, cfg)[0] == ("passed" if passes else "wrong_answer"), returned


def test_wrapped_outputs_must_be_a_bool():
    from bonforge.errors import DataError

    with pytest.raises(DataError, match="'wrapped_outputs' must be true or false"):
        parse_spec(json.dumps({**OWN, "wrapped_outputs": "yes"}), "p")
