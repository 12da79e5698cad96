"""Table files are read within byte bounds (a source's `max_line_mib`, `max_input_gib`): a gzip bomb of one
1 GiB line in a 1 MB file is one `error:` line naming the file and the line, within seconds and with bounded
memory; so are a pool's and a benchmark's; a file of many short lines past the decompressed bound, and a
Parquet file whose footer states more, likewise. The bombs are made here, streamed (gzip members of one
compressed MiB, concatenated), never stored."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.tables.records import ByteLimits, read_records
from pool_recipes import pool_recipe

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def gzip_member(data: bytes) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip member
    return z.compress(data) + z.flush()


def bomb(path: Path, head: bytes, fill: bytes, mib: int, tail: bytes = b"") -> None:
    """``head``, then about ``mib`` MiB of ``fill`` repeated, then ``tail``, gzipped: a MiB (whole ``fill``s)
    compressed once and its member written ``mib`` times (a gzip file may hold several members)."""
    block = gzip_member(fill * (MIB // len(fill)))
    with open(path, "wb") as f:
        f.write(gzip_member(head))
        for _ in range(mib):
            f.write(block)
        f.write(gzip_member(tail))


def one_line_bomb(path: Path, gib: int = 1) -> None:
    bomb(path, b'{"question": "', b"a", gib * 1024, b'", "answer": "1"}\n')


def recipe(tmp: Path, problems: dict, teacher: dict | None = None, **extra) -> Path:
    pool = None if (tmp / "pool.jsonl").exists() else [{"samples": ["2"]}]
    return pool_recipe(tmp, "bounds", problems, pool, teacher, **extra)


pytestmark = pytest.mark.usefixtures("no_services")

def one_error(tmp: Path, path: Path, stage: str = "*") -> str:
    t0 = time.perf_counter()
    res = CliRunner().invoke(app, ["run", str(path), "--store", str(tmp / "store")])
    elapsed = time.perf_counter() - t0
    out = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(out) == 1, (res.exit_code, res.output[-2000:], res.exception)
    assert elapsed < 30, elapsed
    assert not list((tmp / "store").glob(f"stages/{stage}/*/manifest.json"))
    return out[0]


def test_a_one_gib_line_in_a_one_mb_gzip_is_one_error_line(tmp_path):
    one_line_bomb(tmp_path / "p.jsonl.gz")
    assert (tmp_path / "p.jsonl.gz").stat().st_size < 2 * MIB
    line = one_error(tmp_path, recipe(tmp_path, {"source": {"path": "p.jsonl.gz"}}))
    assert line == (f"error: stage problems: {tmp_path / 'p.jsonl.gz'}, record line 1: a line longer than 64 MiB "
                    "(the source's max_line_mib)")  # fmt: skip


def test_the_bomb_costs_seconds_and_bounded_memory(tmp_path):
    """In a fresh interpreter: the read's time, and its peak RSS over the interpreter's own after imports."""
    one_line_bomb(tmp_path / "p.jsonl.gz")
    code = (  # VmHWM: this process's peak RSS (ru_maxrss would start from the parent's, inherited at fork)
        "import re, sys, time; from pathlib import Path; from bonforge.tables.records import read_records; "
        "from bonforge.errors import DataError\n"
        "def hwm(): return int(re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1))\n"
        "base, t0 = hwm(), time.perf_counter()\n"
        "try:\n    list(read_records(Path(sys.argv[1])))\nexcept DataError as e:\n    msg = str(e)\n"
        "print(time.perf_counter() - t0, (hwm() - base) / 1024, msg)"
    )
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path / "p.jsonl.gz")], capture_output=True, text=True,
                         timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    seconds, extra_mib, msg = res.stdout.split(" ", 2)
    print(f"one 1 GiB line in a {(tmp_path / 'p.jsonl.gz').stat().st_size / MIB:.2f} MiB gzip: {float(seconds):.2f} s, "
          f"+{float(extra_mib):.0f} MiB peak RSS")  # fmt: skip
    assert "record line 1: a line longer than 64 MiB" in msg
    assert float(seconds) < 10 and float(extra_mib) < 3 * 64 + 32


def test_the_bounds_are_the_recipes(tmp_path):
    rows = "".join(json.dumps({"question": "q" * 3000, "answer": str(i)}) + "\n" for i in range(3)).encode()
    (tmp_path / "p.jsonl").write_bytes(rows)
    line = one_error(tmp_path, recipe(tmp_path, {"source": {"path": "p.jsonl", "max_line_mib": 0.002}}))
    assert "record line 1: a line longer than 0.00199986 MiB (the source's max_line_mib)" in line
    from bonforge.config import DataSource, ProblemsConfig
    from bonforge.sources.problems import load_problems

    roomy = ProblemsConfig(source=DataSource(path="p.jsonl", max_line_mib=0.01), name="t")
    assert load_problems(roomy, tmp_path / "p.jsonl").num_rows == 3  # the same file within a raised bound


def test_many_short_lines_past_the_decompressed_bound(tmp_path):
    bomb(tmp_path / "p.jsonl.gz", b"", b'{"question": "What?", "answer": "1"}\n', 64)
    limit = {"path": "p.jsonl.gz", "max_input_gib": 1 / 1024}  # 1 MiB
    line = one_error(tmp_path, recipe(tmp_path, {"source": limit}))
    assert re.search(rf"{re.escape(str(tmp_path / 'p.jsonl.gz'))}, record line [1-9][0-9]{{4}}: ", line)
    assert line.endswith("more than 1 MiB of data (decompressed; the source's max_input_gib)")


def test_a_parquet_file_stating_more_than_the_bound(tmp_path):
    table = pa.table({"question": [str(i) * 100_000 for i in range(30)], "answer": ["1"] * 30})  # 3 MB
    pq.write_table(table, tmp_path / "p.parquet", compression="zstd")
    line = one_error(tmp_path, recipe(tmp_path, {"format": "parquet",
                                                 "source": {"path": "p.parquet", "max_input_gib": 1 / 1024}}))
    assert f"{tmp_path / 'p.parquet'}: " in line and "more than 1 MiB (the source's max_input_gib)" in line


def test_a_pool_bomb_and_a_benchmark_bomb(tmp_path):
    (tmp_path / "p.jsonl").write_text(json.dumps({"question": "What is 1 + 1?", "answer": "2"}) + "\n")
    bomb(tmp_path / "pool.jsonl.gz", b'{"samples": ["', b"9", 128, b'"]}\n')
    pool = {"name": "t", "engine": "pool", "source": {"path": "pool.jsonl.gz"}, "match": "order"}
    line = one_error(tmp_path, recipe(tmp_path, {"source": {"path": "p.jsonl"}}, pool), "candidates")
    assert line.startswith(f"error: stage candidates[t]: {tmp_path / 'pool.jsonl.gz'}, record line 1: a line longer")

    shutil.rmtree(tmp_path / "store")
    one_line_bomb(tmp_path / "bench.jsonl.gz")
    bench = {"benchmarks": [{"name": "b", "source": {"path": "bench.jsonl.gz"}, "field": "question", "id": None}]}
    line = one_error(tmp_path, recipe(tmp_path, {"source": {"path": "p.jsonl"}}, decontaminate=bench))
    assert line.startswith(f"error: stage contamination: {tmp_path / 'bench.jsonl.gz'}, record line 1: a line longer")


@pytest.mark.parametrize("chunk", [1, 7, MIB])
def test_lines_are_read_the_same_across_chunk_edges(tmp_path, monkeypatch, chunk):
    import bonforge.tables.records as records

    monkeypatch.setattr(records, "_CHUNK", chunk)
    text = '{"a": 1}\n\n{"b": "x\\ny"}\r\n  \n{"c": 3}'  # blank lines skipped, CRLF, no final newline
    (tmp_path / "p.jsonl").write_text(text)
    assert list(read_records(tmp_path / "p.jsonl")) == [(1, {"a": 1}), (3, {"b": "x\ny"}), (5, {"c": 3})]
    (tmp_path / "q.jsonl").write_text('{"a": "' + "x" * 100 + '"}\n{"b": 1}\n')
    with pytest.raises(Exception, match="record line 1: a line longer"):
        list(read_records(tmp_path / "q.jsonl", ByteLimits(line=50)))
    assert list(read_records(tmp_path / "q.jsonl", ByteLimits(line=109)))[1] == (2, {"b": 1})
    assert gzip  # the module the bombs imitate
