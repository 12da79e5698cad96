"""Real APPS and HumanEval problems rewritten in the shapes other code datasets use (test helpers).

Each ``SHAPES`` entry gives the recipe's ``fields`` for the shape and a function from the data mirror to
``(records, wrong)``: records in that shape, and for each a program that must fail its tests.
"""

from __future__ import annotations

import base64
import gzip
import json
import pickle
import zlib
from pathlib import Path

import pyarrow as pa

from bonforge.schema import CANDIDATES, PROBLEMS


def apps(data: Path, pid: str) -> tuple[dict, list[str], str, str]:
    d = data / "apps-coderl" / pid
    starter = (d / "starter_code.py").read_text() if (d / "starter_code.py").is_file() else ""
    return (json.loads((d / "input_output.json").read_text()), json.loads((d / "solutions.json").read_text()),
            (d / "question.txt").read_text(), starter)  # fmt: skip


STDIO = ("0001", "0111", "2287")


def codecontests(data: Path) -> tuple[list[dict], list[str]]:
    """CodeContests rows (stdin/stdout) from the APPS stdio problems: the first test public, the rest
    private, Python 3 solutions, limits as CodeContests writes them; ``coderl`` holds CodeRL's generated
    programs with their published labels (a candidate pool for ``recipes/codecontests-cpu.yaml``)."""
    rows = []
    for pid in STDIO:
        io, sols, question, _ = apps(data, pid)
        ins, outs = io["inputs"], io["outputs"]
        generated = json.loads((data / "apps-coderl" / pid / "gen_solutions.json").read_text())
        rows.append({
            "name": f"apps-{pid}", "description": question,
            "public_tests": {"input": ins[:1], "output": outs[:1]},
            "private_tests": {"input": ins[1:], "output": outs[1:]},
            "generated_tests": {"input": [], "output": []},
            "solutions": {"language": [3] * len(sols), "solution": sols},
            "time_limit": {"seconds": 2, "nanos": 0}, "memory_limit_bytes": 256 * 2**20,
            "coderl": [{"code": g["code"], "is_correct": g["result"] is True} for g in generated],
        })  # fmt: skip
    return rows, ["print(0)"] * len(rows)


def taco(data: Path) -> tuple[list[dict], list[str]]:
    """TACO / APPS rows: ``input_output`` as a JSON string, stdio and call-based (fn_name inside)."""
    rows = []
    for pid in ("0001", "2404", "4184"):
        io, sols, question, starter = apps(data, pid)
        rows.append({"question": question, "input_output": json.dumps(io), "solutions": json.dumps(sols[:3]),
                     "starter_code": starter, "time_limit": "4 seconds", "memory_limit": "256 megabytes"})  # fmt: skip
    wrong = ["print(-1)", "class Solution:\n    def findKthPositive(self, arr, k):\n        return -1\n",
             "def is_prime(n):\n    return n == 2\n"]  # fmt: skip
    return rows, wrong


def livecodebench(data: Path) -> tuple[list[dict], list[str]]:
    """LiveCodeBench rows: JSON-string test lists, a stdin problem and a functional one (func_name in the
    JSON-string metadata)."""
    io, sols, question, _ = apps(data, "0001")
    stdin = [{"input": i, "output": o, "testtype": "stdin"} for i, o in zip(io["inputs"], io["outputs"])]
    fio, fsols, fquestion, _ = apps(data, "4184")
    functional = [{"input": "\n".join(map(json.dumps, args)), "output": json.dumps(out[0]), "testtype": "functional"}
                  for args, out in zip(fio["inputs"], fio["outputs"])]  # fmt: skip
    rows = [
        {"question_content": question, "public_test_cases": json.dumps(stdin), "metadata": "{}", "ref": sols[0]},
        {"question_content": fquestion, "public_test_cases": json.dumps(functional),
         "metadata": json.dumps({"func_name": "is_prime"}), "ref": fsols[0]},
    ]  # fmt: skip
    return rows, ["print(-1)", "def is_prime(n):\n    return True\n"]


def humaneval(data: Path) -> tuple[list[dict], list[str]]:
    """HumanEval-style rows: ``test`` defines check(candidate), ``entry_point`` names the function."""
    with gzip.open(data / "humaneval" / "HumanEval.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f][:3]
    return rows, ["    return None\n"] * len(rows)


def own_spec(data: Path) -> tuple[list[dict], list[str]]:
    """bonforge's own spec, as an object field."""
    io, sols, question, _ = apps(data, "0111")
    tests = [{"input": i, "output": o} for i, o in zip(io["inputs"], io["outputs"])]
    return [{"question": question, "tests": {"kind": "stdio", "tests": tests}, "answer": sols[0]}], ["print(0)"]


SHAPES = {
    "codecontests": (codecontests, {"question": "description", "id": "name",
                                    "tests": ["public_tests", "private_tests", "generated_tests"],
                                    "solutions": "solutions.solution", "memory_limit": "memory_limit_bytes"}),
    "apps": (taco, {"tests": "input_output", "starter": "starter_code", "solutions": "solutions"}),
    "livecodebench": (livecodebench, {"question": "question_content", "tests": "public_test_cases",
                                      "fn_name": "metadata.func_name", "answer": "ref"}),
    "assert": (humaneval, {"question": "prompt", "id": "task_id", "tests": "test", "entry_point": "entry_point",
                           "answer": "canonical_solution"}),
    "bonforge": (own_spec, {"tests": "tests"}),
}  # fmt: skip


def lcb_private_tests(tests: list[dict]) -> str:
    """How LiveCodeBench ships private tests: base64 of zlib of a pickle (never loaded by bonforge)."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def one_problem(spec: dict, programs: list[str]) -> tuple[pa.Table, pa.Table]:
    """A problems table of one code problem ``p`` with the tests ``spec``, and a candidate per program."""
    problems = pa.Table.from_pylist(
        [{"problem_id": "p", "source": "t", "domain": "code", "question": "", "tests": json.dumps(spec)}],
        schema=PROBLEMS,
    )
    cands = pa.Table.from_pylist(
        [{"candidate_id": f"p/t/{i}", "problem_id": "p", "teacher": "t", "sample_index": i, "text": p}
         for i, p in enumerate(programs)],
        schema=CANDIDATES,
    )  # fmt: skip
    return problems, cands
