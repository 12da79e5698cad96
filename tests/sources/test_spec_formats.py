"""Specs, test fields and limits from a table, on generated hostile values: each is read or refused with
a ``DataError`` (one error line naming the field), never another exception, in time linear in its size.
What a table says of its tests (a checker, time and memory limits) reaches the judge: loaded, then judged by
the verdicts stage and by the RL rows' code reward in the sandbox."""

from __future__ import annotations

import json
import time

import pytest

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


PAIRS_CHECKER = r"""#include <cstdio>
#include <algorithm>
int main(int argc, char** argv) {  // the two numbers in either order
    long long o[2], a[2];
    FILE* out = fopen(argv[2], "r"); FILE* ans = fopen(argv[3], "r");
    if (fscanf(out, "%lld %lld", &o[0], &o[1]) != 2) return 2;
    if (fscanf(ans, "%lld %lld", &a[0], &a[1]) != 2) return 3;
    std::sort(o, o + 2); std::sort(a, a + 2);
    return o[0] == a[0] && o[1] == a[1] ? 0 : 1;
}
"""
PAIRS_SPEC = {"kind": "stdio", "tests": [{"input": "2 1\n", "output": "1 2\n"}, {"input": "5 3\n", "output": "3 5\n"}],
              "checker": {"source": PAIRS_CHECKER, "files": {"extra.h": "// a header\n"}}, "time_limit_s": 1.0,
              "memory_mb": 128.0}  # fmt: skip


def load_rows(tmp_path, rows: list[dict], **fields):
    """The PROBLEMS table the ``problems`` stage's loader makes of a code JSONL table."""
    from bonforge.config import ProblemsConfig
    from bonforge.sources.problems import load_problems

    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = ProblemsConfig.model_validate({"name": "t", "domain": "code", "source": {"path": str(path)},
                                         "fields": {"question": "q", "id": "id", "tests": "tests", **fields}})
    return load_problems(cfg, path)


def test_a_bonforge_spec_keeps_every_field_through_load(tmp_path):
    """Its checker (with its headers), limits, prelude and, for assert-style tests, its entry point and context
    reach the stored spec as the table wrote them, as an object or a JSON string (they were dropped)."""
    check = {"kind": "assert", "entry_point": "f", "check": "assert f(1) == 2\n", "context": "def helper(): ...\n",
             "prelude": "import math\n", "time_limit_s": 2.5, "memory_mb": 200}  # fmt: skip
    table = load_rows(tmp_path, [{"id": "pairs", "q": "?", "tests": PAIRS_SPEC},
                                 {"id": "pairs-text", "q": "?", "tests": json.dumps(PAIRS_SPEC)},
                                 {"id": "check", "q": "?", "tests": check}])  # fmt: skip
    stored = dict(zip(table.column("problem_id").to_pylist(), table.column("tests").to_pylist()))
    assert parse_spec(stored["pairs"], "p") == parse_spec(stored["pairs-text"], "p") == parse_spec(
        json.dumps(PAIRS_SPEC), "p")
    assert parse_spec(stored["check"], "p") == parse_spec(json.dumps(check), "p")


def test_a_records_limits_fill_in_and_never_silently_override_the_spec(tmp_path):
    bare = {k: v for k, v in PAIRS_SPEC.items() if k not in ("time_limit_s", "memory_mb")}
    table = load_rows(tmp_path, [{"id": "a", "q": "?", "tests": bare, "time_limit": "500 ms",
                                  "memory_limit": "64 megabytes"},
                                 {"id": "b", "q": "?", "tests": PAIRS_SPEC, "time_limit": 1, "memory_limit": 128}])
    a, b = (parse_spec(t, "p") for t in table.column("tests").to_pylist())
    assert (a.time_limit_s, a.memory_mb, a.checker) == (0.5, 64.0, PAIRS_SPEC["checker"])  # filled in
    assert (b.time_limit_s, b.memory_mb) == (1.0, 128.0)  # the same values said twice
    for field, value, key in (("time_limit", "2 seconds", "time_limit_s"), ("memory_limit", "1 GB", "memory_mb")):
        try:
            load_rows(tmp_path, [{"id": "c", "q": "?", "tests": PAIRS_SPEC, field: value}])
        except DataError as e:
            assert f"the spec's '{key}'" in e.message and "differs from the record's" in e.message and "c" in str(e)
        else:
            raise AssertionError(f"a record's {field} that contradicts its spec was taken silently")


def test_a_records_entry_point_never_silently_replaces_the_specs():
    check = {"kind": "assert", "entry_point": "f", "check": "assert f(1) == 2\n"}
    assert to_spec({"tests": check}, "bonforge", W, entry_point="f").entry_point == "f"
    try:
        got = to_spec({"tests": check}, "bonforge", W, entry_point="g")
    except DataError as e:
        got = e
    assert isinstance(got, DataError) and "the spec's 'entry_point' ('f') differs" in got.message, got


def test_joined_fields_must_agree_on_the_checker_and_limits():
    public = {"kind": "stdio", "tests": [{"input": "1", "output": "1"}], "checker": {"source": "int main(){}"}}
    private = dict(public, tests=[{"input": "2", "output": "2"}])
    spec = to_spec({"public": public, "private": private}, "bonforge", W)
    assert spec.inputs == ["1", "2"] and spec.checker == {"source": "int main(){}", "files": {}}
    for other in (dict(private, checker={"source": "int main(){return 1;}"}), dict(private, memory_mb=64),
                  {k: v for k, v in private.items() if k != "checker"}):  # fmt: skip
        got = read_or_refuse(to_spec, {"public": public, "private": other}, "bonforge", W)
        assert isinstance(got, DataError) and "the fields give different" in got.message, got


def test_a_codecontests_memory_limit_is_in_the_spec(tmp_path):
    """The judge and the RL rows read the spec: the record's memory limit must be in it, not only in the
    metadata (which neither reads); the time limit likewise."""
    row = {"id": "cc", "q": "?", "tests": {"input": ["1\n"], "output": ["1\n"]},
           "time_limit": {"seconds": 1, "nanos": 500_000_000}, "memory_limit_bytes": 64 << 20}  # fmt: skip
    table = load_rows(tmp_path, [row], tests_format="codecontests", memory_limit="memory_limit_bytes")
    spec = parse_spec(table.column("tests")[0].as_py(), "cc")
    assert (spec.time_limit_s, spec.memory_mb) == (1.5, 64.0)
    assert json.loads(table.column("metadata")[0].as_py())["memory_limit_mb"] == 64.0


FENCE = "```python\n{}```\n"
SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.2:\n    pass\n"  # 1.2 s of CPU
HOG = "held = bytearray(400 << 20)\n"  # 400 MiB: over the problem's 128, under the recipe's 512


def stage_verdicts(problems, texts: dict[str, tuple[str, str]], cfg) -> dict[str, dict]:
    """The verdicts stage's own compute on the columns the stage reads of each table (``stages.verify``);
    ``texts``: candidate id -> (problem id, program)."""
    import pyarrow as pa

    from bonforge.schema import CANDIDATES
    from bonforge.stages.verify import JUDGED, _verify_code

    cands = pa.Table.from_pylist([{"candidate_id": c, "problem_id": p, "teacher": "t", "sample_index": 0,
                                   "text": FENCE.format(t)} for c, (p, t) in texts.items()], schema=CANDIDATES)
    out = _verify_code(cands.select(JUDGED["candidates"]), problems.select(JUDGED["problems"]), cfg)
    return {v["candidate_id"]: v for v in out.to_pylist()}


@pytest.mark.docker
def test_a_tables_checker_and_limits_decide_its_verdicts(tmp_path, sandbox_image):
    """A bonforge spec in a table, loaded and judged by the verdicts stage: an answer only its checker accepts
    passes (it was judged against the jury's bytes), a program over its 1 s or 128 MiB fails (under the
    recipe's 5 s and 512 MiB they passed). Controls: the jury's own output passes and a wrong one does not
    under the same checker and limits; without the limits the slow and big programs pass."""
    from bonforge.sandbox.config import CodeVerifyConfig

    roomy = {k: v for k, v in PAIRS_SPEC.items() if k not in ("time_limit_s", "memory_mb")}
    problems = load_rows(tmp_path, [{"id": "pairs", "q": "Print the two numbers.", "tests": PAIRS_SPEC},
                                    {"id": "roomy", "q": "Print the two numbers.", "tests": roomy}])
    as_read = "a, b = input().split()\nprint(a, b)\n"  # "2 1" where the jury wrote "1 2"
    jury = "print(*sorted(map(int, input().split())))\n"
    # wide wall-clock nets: the controls' 1.2 s of CPU per test took 30 s of wall at a load of 24 on 2 cores
    cfg = CodeVerifyConfig(image=sandbox_image, pool_size=2, time_limit_s=5.0, wall_factor=8.0, memory_mb=512,
                           candidate_wall_s=300)  # fmt: skip
    got = stage_verdicts(problems, {
        "as-read": ("pairs", as_read), "jury": ("pairs", jury), "wrong": ("pairs", "print(0, 0)\n"),
        "slow": ("pairs", SPIN + as_read), "big": ("pairs", HOG + jury),
        "roomy/slow": ("roomy", SPIN + as_read), "roomy/big": ("roomy", HOG + jury)}, cfg)  # fmt: skip
    statuses = {c: v["status"] for c, v in got.items()}
    assert statuses == {"as-read": "passed", "jury": "passed", "wrong": "wrong_answer", "slow": "timeout",
                        "big": "memory_limit", "roomy/slow": "passed", "roomy/big": "passed"}, got  # fmt: skip


@pytest.mark.docker
def test_a_codecontests_limit_judges_alike_in_the_stage_and_the_reward(tmp_path, sandbox_image):
    """A CodeContests row's own limits (1 s, 128 MiB; the recipe's: 5 s, 512 MiB) give the same verdicts in the
    verdicts stage and in the code reward on the RL row the export writes (both applied the recipe's: the
    stage never read the metadata the limit was recorded in, and the RL rows did not carry it)."""
    import pyarrow as pa

    from bonforge.rewards.code import score_batch
    from bonforge.sandbox.config import CodeVerifyConfig
    from bonforge.storage.export import to_rl

    row = {"id": "cc", "q": "Echo the number.", "tests": {"input": ["3\n", "4\n"], "output": ["3\n", "4\n"]},
           "time_limit": {"seconds": 1, "nanos": 0}, "memory_limit_bytes": 128 << 20}  # fmt: skip
    problems = load_rows(tmp_path, [row], tests_format="codecontests", memory_limit="memory_limit_bytes")
    echo = "print(input())\n"
    programs = {"right": echo, "hog": HOG + echo, "spin": SPIN + echo}
    cfg = CodeVerifyConfig(image=sandbox_image, pool_size=2, time_limit_s=5.0, memory_mb=512)
    stage = {c: v["status"] for c, v in stage_verdicts(problems, {c: ("cc", t) for c, t in programs.items()},
                                                        cfg).items()}  # fmt: skip
    assert stage == {"right": "passed", "hog": "memory_limit", "spin": "timeout"}
    kept = pa.Table.from_pylist([dict(problems.to_pylist()[0], pass_rate=1 / 3, n=3, n_correct=1, pass_at_k=[],
                                      teachers=["t"])])  # fmt: skip
    rl = to_rl(kept, "cc", {"code": "{question}"}, {"code": cfg}).to_pylist()[0]
    rewards = score_batch([FENCE.format(t) for t in programs.values()], [rl["reward_model"]["ground_truth"]] * 3,
                          [rl["extra_info"]] * 3, pool_size=2)  # fmt: skip
    assert dict(zip(programs, (r["status"] for r in rewards))) == stage
