"""Specs, test fields and limits from a table, on generated hostile values: each is read or refused with
a ``DataError`` (one error line naming the field), never another exception, in time linear in its size."""

from __future__ import annotations

import json
import time

from hypothesis import HealthCheck, example, given, settings, strategies as st

from bonforge.errors import DataError
from bonforge.judging.spec import MAX_TIME_LIMIT_S, parse_spec
from bonforge.tables.records import get_field
from bonforge.sources.spec_formats import Where, memory_limit_mb, time_limit_s, to_spec

W = Where("t.jsonl", "line 1")
PIECES = ["{", "}", "[", "]", '"', ":", ",", " ", "\n", "1", "9" * 50, "-", ".", "e", "NaN", "Infinity", "null",
          "true", '"kind"', '"stdio"', '"call"', '"assert"', '"tests"', '"input"', '"output"', '"args"',
          '"fn_name"', '"time_limit_s"', '"inputs"', '"outputs"', '"\\ud800"', "\\u0000", "gASV", "x"]  # fmt: skip
TEXTS = st.lists(st.tuples(st.sampled_from(PIECES), st.sampled_from([1, 1, 2, 5, 300, 20_000])), max_size=12).map(
    lambda blocks: "".join(piece * n for piece, n in blocks))
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(
                        ["kind", "tests", "input", "output", "inputs", "outputs", "args", "fn_name", "testtype",
                         "seconds", "nanos", "time_limit_s", "x"]), inner, max_size=5), max_leaves=30)  # fmt: skip
HOSTILE = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def read_or_refuse(fn, *args):
    """``fn(*args)``, or the ``DataError`` it raised (any other exception fails the test), in bounded time."""
    t0 = time.perf_counter()
    try:
        out = fn(*args)
    except DataError as e:
        out = e
    assert time.perf_counter() - t0 < 5.0  # milliseconds idle; quadratic scans took 25 s and more
    return out


@HOSTILE
@given(TEXTS)
def test_a_spec_text_is_read_or_refused(text):
    spec = read_or_refuse(parse_spec, text, "p")
    if not isinstance(spec, DataError):
        assert spec.time_limit_s is None or 0 < spec.time_limit_s <= MAX_TIME_LIMIT_S
        assert parse_spec(spec.to_json(), "p") == spec


@HOSTILE
@given(st.one_of(TEXTS, JSON), st.sampled_from(["auto", "apps", "codecontests", "livecodebench", "assert",
                                                "bonforge"]))  # fmt: skip
@example([None], "assert")  # raised TypeError
@example([{"testtype": []}], "auto")  # raised TypeError (unhashable)
def test_a_tests_field_is_read_or_refused(value, fmt):
    spec = read_or_refuse(to_spec, {"tests": value}, fmt, W)
    if not isinstance(spec, DataError):
        json.loads(spec.to_json())


@HOSTILE
@given(st.one_of(TEXTS, JSON))
def test_a_limit_is_read_or_refused(value):
    seconds = read_or_refuse(time_limit_s, value, W, "time_limit")
    assert isinstance(seconds, DataError) or seconds is None or 0 < seconds <= MAX_TIME_LIMIT_S
    mb = read_or_refuse(memory_limit_mb, value, W, "memory_limit_bytes")
    assert isinstance(mb, DataError) or mb is None or mb > 0


@HOSTILE
@given(TEXTS)
def test_a_dotted_path_through_a_json_string_is_read_or_refused(text):
    read_or_refuse(lambda: get_field({"meta": "{" + text}, "meta.name", source="t.jsonl", record="line 1"))
