"""Hostile problem tables through `bonforge run`: each gives one `error:` line naming the file, the record
and the field, exit code 2, and nothing committed (no stage manifest, no dataset); none raises a traceback
(RecursionError, UnicodeDecodeError, ArrowInvalid, AttributeError ...), none takes long, and no pickle is
ever unpickled. Every case runs through the CLI's command in-process; a few through `python -m bonforge`.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import pickle
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from bonforge.cli import app
from pool_recipes import pool_recipe

DEEP = "[" * 100_000 + "]" * 100_000  # json.loads raised RecursionError past ~1,000 levels
HUGE_INT = "1" * 5_000  # past int()'s 4,300-digit limit
Q = {"question": "Print 1.", "answer": "1"}
STDIO = {"input": [""], "output": ["1"]}
WITH_TESTS = '{"question": "q", "tests": {"input": [""], "output": ["1"]}, '  # a JSON line's start (NaN is not JSON)


class Marker:
    """Unpickling this creates a file: a loader that ever unpickles would leave it behind."""

    path = ""

    def __reduce__(self):
        return (open, (self.path, "w"))


def pickled(tmp: Path, compress: bool) -> bytes:
    Marker.path = str(tmp / "UNPICKLED")
    raw = pickle.dumps(Marker(), protocol=4)
    return zlib.compress(raw) if compress else raw


def lines(*records) -> bytes:
    return b"".join((r if isinstance(r, bytes) else (r if isinstance(r, str) else json.dumps(r)).encode()) + b"\n"
                    for r in records)  # fmt: skip


def code_fields(**extra) -> dict:
    return {"tests": "tests", "time_limit": "time_limit", "memory_limit": "memory_limit", **extra}


def parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


# name -> (files {relative path: bytes}, problems section, expected fragment of the error line)
# The problems section's source path is "data" (a file or a folder) unless it names one.
def cases(tmp: Path) -> dict[str, tuple[dict, dict, str]]:
    jsonl = {"format": "jsonl"}
    code = {"format": "jsonl", "domain": "code"}
    io_ok = json.dumps({"inputs": [""], "outputs": ["1"]}).encode()
    apps_ok = {"question.txt": b"Print 1.", "input_output.json": io_ok}

    def apps(**files) -> dict:
        return {f"data/0001/{k}": v for k, v in {**apps_ok, **files}.items()}

    lcb = [{"input": "1", "output": "1", "testtype": "functional"}]
    good_state = {"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}
    return {
        # -- JSONL lines ------------------------------------------------------------------------------------
        "jsonl nested too deep": ({"data": lines(Q, '{"question": ' + DEEP + "}")}, jsonl,
                                  "record line 2: not valid JSON (nested deeper than 100 levels)"),
        "jsonl huge integer": ({"data": lines('{"question": "q", "answer": ' + HUGE_INT + "}")}, jsonl,
                               "record line 1: not valid JSON (Exceeds the limit"),
        "jsonl lone surrogate": ({"data": lines('{"question": "\\ud800", "answer": "1"}')}, jsonl,
                                 "record line 1: not valid JSON (a lone surrogate"),
        "jsonl not utf-8": ({"data": lines(Q, b'{"question": "\xff\xfe"}')}, jsonl, "record line 2: invalid UTF-8"),
        "jsonl a list": ({"data": lines("[1, 2]")}, jsonl, "record line 1: expected a JSON object, got list"),
        "jsonl NaN": ({"data": lines("NaN")}, jsonl, "record line 1: expected a JSON object, got float"),
        "gzip truncated": ({"data.jsonl.gz": gzip.compress(lines(*[Q] * 200))[:60]},
                           {**jsonl, "source": {"path": "data.jsonl.gz"}}, "cannot read the file (EOFError"),
        "gzip not gzip": ({"data.jsonl.gz": lines(Q)}, {**jsonl, "source": {"path": "data.jsonl.gz"}},
                          "cannot read the file (BadGzipFile"),
        "dotted path through deep JSON": ({"data": lines({"meta": '{"q": ' + DEEP + "}"})},
                                          {**jsonl, "fields": {"question": "meta.q"}},
                                          "record line 1, field 'meta.q': not valid JSON (nested deeper"),
        "dotted path through broken JSON": ({"data": lines({"meta": "{not json"})},
                                            {**jsonl, "fields": {"question": "meta.q"}},
                                            "record line 1, field 'meta.q': not valid JSON (Expecting"),
        # -- code problems' tests and limits ----------------------------------------------------------------
        "tests a deep JSON string": ({"data": lines({**Q, "tests": DEEP})}, {**code, "fields": code_fields()},
                                     "record line 1 (toy/00000), field 'tests': not valid JSON (nested deeper"),
        "tests a huge integer": ({"data": lines({**Q, "tests": '{"inputs": [""], "outputs": [' + HUGE_INT + "]}"})},
                                 {**code, "fields": code_fields()}, "field 'tests': not valid JSON (Exceeds"),
        "tests pickled (LiveCodeBench style)": (
            {"data": lines({**Q, "tests": base64.b64encode(pickled(tmp, True)).decode()})},
            {**code, "fields": code_fields()}, "field 'tests': a pickled (or compressed pickled) value"),
        "assert lines without an entry point": ({"data": lines({**Q, "tests": ["assert f(1) == 1"]})},
                                                {**code, "fields": code_fields()},
                                                "field 'tests': assert-style tests need the function they test"),
        "tests an integer": ({"data": lines({**Q, "tests": 42})}, {**code, "fields": code_fields()},
                             "field 'tests': cannot tell the tests' shape (int)"),
        "tests call of a dotted name": (
            {"data": lines({**Q, "tests": {"inputs": [[1]], "outputs": [1], "fn_name": "os.system"}})},
            {**code, "fields": code_fields()}, "field 'tests': fn_name must be a Python identifier"),
        "tests stdin not text": ({"data": lines({**Q, "tests": {"input": [1], "output": ["1"]}})},
                                 {**code, "fields": code_fields()}, "field 'tests': test 0: stdin must be a string"),
        "livecodebench input nested too deep": (
            {"data": lines({**Q, "tests": [{**lcb[0], "input": DEEP}], "fn": "f"})},
            {**code, "fields": code_fields(fn_name="fn")},
            "field 'tests': test 0: functional input and output must be JSON (not valid JSON (nested deeper"),
        "livecodebench output a huge integer": (
            {"data": lines({**Q, "tests": [{**lcb[0], "output": HUGE_INT}], "fn": "f"})},
            {**code, "fields": code_fields(fn_name="fn")}, "field 'tests': test 0: functional input and output"),
        "our spec with a NaN limit": (
            {"data": lines({**Q, "tests": '{"kind": "stdio", "tests": [{"output": "1"}], "time_limit_s": NaN}'})},
            {**code, "fields": code_fields()}, "field 'tests': 'time_limit_s' must be a finite positive number"),
        "time limit NaN": ({"data": lines(WITH_TESTS + '"time_limit": NaN}')},
                           {**code, "fields": code_fields()}, "field 'time_limit': not a time limit: nan"),
        "time limit infinite": ({"data": lines(WITH_TESTS + '"time_limit": -Infinity}')},
                                {**code, "fields": code_fields()}, "field 'time_limit': not a time limit: -inf"),
        "time limit of 100 KB": ({"data": lines({**Q, "tests": STDIO, "time_limit": "1" + " " * 100_000 + "x"})},
                                 {**code, "fields": code_fields()}, "field 'time_limit': not a time limit: '1 "),
        "time limit seconds as text": ({"data": lines({**Q, "tests": STDIO, "time_limit": {"seconds": "2"}})},
                                       {**code, "fields": code_fields()}, "field 'time_limit': not a time limit's"),
        "time limit negative": ({"data": lines({**Q, "tests": STDIO, "time_limit": -3})},
                                {**code, "fields": code_fields()}, "field 'time_limit': not a time limit: -3"),
        "memory limit infinite": ({"data": lines(WITH_TESTS + '"memory_limit": Infinity}')},
                                  {**code, "fields": code_fields()}, "field 'memory_limit': not a memory limit: inf"),
        "memory limit of 100 KB": ({"data": lines({**Q, "tests": STDIO, "memory_limit": "2" * 100_000})},
                                   {**code, "fields": code_fields()}, "field 'memory_limit': not a memory limit"),
        "solutions a deep JSON string": ({"data": lines({**Q, "tests": STDIO, "sols": DEEP})},
                                         {**code, "fields": code_fields(solutions="sols")},
                                         "field 'sols': expected a list of programs or its JSON string"),
        # -- APPS folders -------------------------------------------------------------------------------------
        "apps input_output nested too deep": (apps(**{"input_output.json": DEEP.encode()}), {"format": "apps"},
                                              "input_output.json, record apps/0001, field 'input_output': not valid "
                                              "JSON (nested deeper"),
        "apps input_output not JSON": (apps(**{"input_output.json": b"{'inputs': []}"}), {"format": "apps"},
                                       "input_output.json, record apps/0001, field 'input_output': not valid JSON"),
        "apps input_output a list": (apps(**{"input_output.json": b"[]"}), {"format": "apps"},
                                     "field 'input_output': expected an object with inputs and outputs, got list"),
        "apps input_output lone surrogate": (
            apps(**{"input_output.json": b'{"inputs": ["\\udfff"], "outputs": ["1"]}'}), {"format": "apps"},
            "field 'input_output': not valid JSON (a lone surrogate"),
        "apps solutions not JSON": (apps(**{"solutions.json": b"print(1)"}), {"format": "apps"},
                                    "solutions.json, record apps/0001, field 'solutions': not valid JSON"),
        "apps solutions not programs": (apps(**{"solutions.json": b"[1, 2]"}), {"format": "apps"},
                                        "field 'solutions': expected a list of programs (strings)"),
        "apps metadata a list": (apps(**{"metadata.json": b"[1]"}), {"format": "apps"},
                                 "metadata.json, record apps/0001, field 'metadata': expected an object, got list"),
        "apps question not utf-8": (apps(**{"question.txt": b"caf\xe9"}), {"format": "apps"},
                                    "question.txt, record apps/0001, field 'question': invalid UTF-8 at byte 3"),
        "apps question missing": ({k: v for k, v in apps().items() if not k.endswith("question.txt")},
                                  {"format": "apps"}, "question.txt, record apps/0001, field 'question': cannot read"),
        "apps starter not utf-8": (apps(**{"starter_code.py": b"\x80"}), {"format": "apps"},
                                   "starter_code.py, record apps/0001, field 'starter_code': invalid UTF-8"),
        # -- HumanEval ------------------------------------------------------------------------------------------
        "humaneval nested too deep": ({"data": lines('{"task_id": ' + DEEP + "}")}, {"format": "humaneval"},
                                      "record line 1: not valid JSON (nested deeper"),
        "humaneval entry point not a name": (
            {"data": lines({"task_id": "H/0", "prompt": "p", "canonical_solution": "c", "test": "t",
                            "entry_point": "f(); import os"})}, {"format": "humaneval"},
            "record H/0, field 'entry_point': expected a Python identifier"),  # fmt: skip
        "humaneval test not text": (
            {"data": lines({"task_id": "H/0", "prompt": "p", "canonical_solution": "c", "test": ["t"],
                            "entry_point": "f"})}, {"format": "humaneval"},
            "record H/0, field 'test': expected a str, got list"),  # fmt: skip
        # -- Parquet, Arrow and Hugging Face folders --------------------------------------------------------------
        "parquet corrupt": ({"data.parquet": b"PAR1" + b"\x00" * 64 + b"PAR1"},
                            {"format": "parquet", "source": {"path": "data.parquet"}}, "cannot read the file (OSError"),
        "parquet truncated": ({"data.parquet": parquet_bytes(pa.table({"question": ["q"] * 1000}))[:300]},
                              {"format": "parquet", "source": {"path": "data.parquet"}}, "cannot read the file"),
        "parquet raw pickle in a binary column": (
            {"data.parquet": parquet_bytes(pa.table({"question": ["q"], "tests": [pickled(tmp, False)]}))},
            {"format": "parquet", "domain": "code", "source": {"path": "data.parquet"}, "fields": code_fields()},
            "record row 0 (toy/00000), field 'tests': a pickled (or compressed pickled) value"),
        "parquet metadata JSON cannot hold": (
            {"data.parquet": parquet_bytes(pa.table({"question": ["q"], "answer": ["1"], "blob": [b"\x00\xff"]}))},
            {"format": "parquet", "source": {"path": "data.parquet"}, "fields": {"metadata": ["blob"]}},
            "record row 0, field 'blob': a value JSON cannot hold"),
        "hf arrow corrupt": ({"data/state.json": json.dumps(good_state).encode(),
                              "data/data-00000-of-00001.arrow": b"\xff" * 100}, {"format": "hf"},
                             "data-00000-of-00001.arrow: cannot read the file"),
        "hf state.json of strings": ({"data/state.json": b'["a", "b"]'}, {"format": "hf"},
                                     "state.json, field '_data_files': expected a list of {filename} objects"),
        "hf state.json leading out": ({"data/state.json": json.dumps({"_data_files": [{"filename": "../x"}]}).encode()},
                                      {"format": "hf"}, "state.json, field '_data_files': expected a list of"),
        "hf state.json not JSON": ({"data/state.json": b"{"}, {"format": "hf"}, "state.json: not valid JSON"),
        "hf state.json names a missing file": ({"data/state.json": json.dumps(good_state).encode()}, {"format": "hf"},
                                               "state.json, field '_data_files': names 'data-00000-of-00001.arrow'"),
        "hf dataset_dict splits a string": ({"data/dataset_dict.json": b'{"splits": "train"}'}, {"format": "hf"},
                                            "dataset_dict.json, field 'splits': expected a list of split names"),
    }  # fmt: skip


CASE_NAMES = list(cases(Path("/nonexistent")))
POOL = {"question": "Print 1.", "s": [{"solution": "print(1)", "ok": True}]}


def setup(tmp: Path, name: str) -> Path:
    files, problems, _ = cases(tmp)[name]
    for rel, content in files.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_bytes(content)
    teacher = {"name": "t", "engine": "pool", "source": {"path": "pool.jsonl"}, "samples": "s", "text": "solution",
               "label": "ok"}
    return pool_recipe(tmp, "hostile", {"source": {"path": "data"}, **problems}, [POOL], teacher)


def assert_nothing_committed(store: Path) -> None:
    assert not list(store.glob("stages/*/*/manifest.json")) and not list(store.glob("datasets/*/*")), \
        sorted(map(str, store.rglob("*")))


pytestmark = pytest.mark.usefixtures("no_services")

@pytest.mark.parametrize("name", CASE_NAMES)
def test_a_hostile_table_is_one_error_line(tmp_path, monkeypatch, name):
    path = setup(tmp_path, name)

    def never(*a, **k):
        raise AssertionError("a loader unpickled data")

    for fn in ("load", "loads"):
        monkeypatch.setattr(pickle, fn, never)
    t0 = time.perf_counter()
    res = CliRunner().invoke(app, ["run", str(path), "--store", str(tmp_path / "store")])
    elapsed = time.perf_counter() - t0
    out = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(out) == 1, (res.exit_code, res.output[-2000:], res.exception)
    assert out[0].startswith(f"error: stage problems: {tmp_path}"), out[0][:500]
    assert cases(tmp_path)[name][2] in out[0], out[0][:500]
    assert len(out[0]) < 1500  # a line, not a dump of the data
    assert elapsed < 30
    assert not (tmp_path / "UNPICKLED").exists()
    assert_nothing_committed(tmp_path / "store")


@pytest.mark.parametrize("name", ["jsonl nested too deep", "apps metadata a list", "hf state.json of strings",
                                  "tests pickled (LiveCodeBench style)", "parquet corrupt"])  # fmt: skip
def test_the_real_command(tmp_path, name):
    path = setup(tmp_path, name)
    res = subprocess.run([sys.executable, "-m", "bonforge", "run", str(path), "--store", str(tmp_path / "store")],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    err = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(err) == 1 and err[0].startswith("error: stage problems: "), res.stderr[-2000:]
    assert cases(tmp_path)[name][2] in err[0]
    assert "Traceback" not in res.stderr + res.stdout
    assert not (tmp_path / "UNPICKLED").exists()
    assert_nothing_committed(tmp_path / "store")


def test_the_marker_does_unpickle():
    """The pickle cases mean something: loading one of them does create the file."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        raw = pickled(Path(d), True)
        pickle.loads(zlib.decompress(raw)).close()
        assert (Path(d) / "UNPICKLED").exists()


def test_a_huge_limit_is_capped_not_refused(tmp_path):
    """A finite limit over the recipe's bound loads, capped (no problem may ask for more than a recipe may)."""
    from bonforge.config import DataSource, FieldMap, ProblemsConfig
    from bonforge.judging.spec import MAX_TIME_LIMIT_S, parse_spec
    from bonforge.stages.load import load_problems

    p = tmp_path / "p.jsonl"
    tests = {"input": [""], "output": ["1"]}
    p.write_bytes(lines({**Q, "tests": tests, "time_limit": 1e300, "memory_limit": 10**400},
                        {**Q, "question": "q2", "tests": tests, "time_limit": {"seconds": 10**400}}))
    cfg = ProblemsConfig(source=DataSource(path=str(p)), name="t", domain="code", fields=FieldMap(tests="tests"))
    table = load_problems(cfg, p)
    assert [parse_spec(t, "x").time_limit_s for t in table.column("tests").to_pylist()] == [MAX_TIME_LIMIT_S] * 2
    assert json.loads(table.column("metadata")[0].as_py())["memory_limit_mb"] == 2.0**20


# -- candidate pools: the same rules (stage candidates[t]) ------------------------------------------------------
APPS_OK = {"data/0001/question.txt": b"Print 1.",
           "data/0001/input_output.json": json.dumps({"inputs": [""], "outputs": ["1"]}).encode()}  # fmt: skip
HUMANEVAL = lines({"task_id": "H/0", "prompt": "def f():\n", "canonical_solution": "    return 1\n",
                   "test": "def check(c):\n    assert c() == 1\n", "entry_point": "f"})  # fmt: skip
POOLS = {
    "pool line nested too deep": ({"pool.jsonl": lines('{"question": "Print 1.", "s": ' + DEEP + "}")}, {},
                                  "pool.jsonl, record line 1: not valid JSON (nested deeper"),
    "pool sample a lone surrogate": ({"pool.jsonl": lines('{"question": "Print 1.", "s": [{"solution": "\\ud800"}]}')},
                                     {}, "pool.jsonl, record line 1: not valid JSON (a lone surrogate"),
    "apps gen_solutions not JSON": ({**APPS_OK, "data/0001/gen_solutions.json": b"[{"}, {"format": "apps"},
                                    "gen_solutions.json, record apps/0001, field 'gen_solutions': not valid JSON"),
    "apps gen_solutions an object": ({**APPS_OK, "data/0001/gen_solutions.json": b"{}"}, {"format": "apps"},
                                     "field 'gen_solutions': expected a list of {code, result} objects, got dict"),
    "apps gen_solutions code not text": ({**APPS_OK, "data/0001/gen_solutions.json": b'[{"code": 1, "result": true}]'},
                                         {"format": "apps"}, "record apps/0001[0], field 'code': expected a str"),
    "codet samples not text": ({"he.jsonl": HUMANEVAL, "pool.jsonl": lines({"prompt": "def f():\n", "samples": [1]})},
                               {"format": "codet"}, "record 1, field 'samples': expected a list of programs"),
}  # fmt: skip


@pytest.mark.parametrize("name", POOLS)
def test_a_hostile_pool_is_one_error_line(tmp_path, name):
    files, teacher, message = POOLS[name]
    for rel, content in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(content)
    if "apps" in name:
        problems = {"name": "apps", "domain": "code", "format": "apps", "source": {"path": "data"}}
        pool = {"name": "t", "engine": "pool", "source": {"path": "data"}, **teacher}
    elif "codet" in name:
        problems = {"name": "he", "domain": "code", "format": "humaneval", "source": {"path": "he.jsonl"}}
        pool = {"name": "t", "engine": "pool", "source": {"path": "pool.jsonl"}, **teacher}
    else:
        (tmp_path / "data").write_bytes(lines(Q))
        problems = {"name": "toy", "source": {"path": "data"}}
        pool = {"name": "t", "engine": "pool", "source": {"path": "pool.jsonl"}, "samples": "s", "text": "solution"}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({"name": "hostile", "problems": problems, "teachers": [pool],
                                    "export": {"name": "hostile"}}))  # fmt: skip
    res = CliRunner().invoke(app, ["run", str(path), "--store", str(tmp_path / "store")])
    out = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(out) == 1, (res.exit_code, res.output[-2000:], res.exception)
    assert out[0].startswith("error: stage candidates[t]: ") and message in out[0], out[0][:500]
    assert not list((tmp_path / "store").glob("stages/candidates/*/manifest.json"))
    assert not list((tmp_path / "store").glob("datasets/*/*"))
