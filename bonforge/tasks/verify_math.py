"""Stage `verdicts` for math: extract the final answer, check it against the gold answer with math-verify.

math-verify's own timeout relies on SIGALRM (main thread only) and cannot interrupt some C-level hangs
(a deep power tower makes sympy compute forever). So checks run in a child process that the caller kills
on a hard wall-clock limit per item: a killed item gets status ``timeout`` and the work goes on with a
fresh child. The child is started once per worker process and reused across shards.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from functools import lru_cache

import pyarrow as pa

from bonforge.config import MathVerifyConfig
from bonforge.schema import VERDICTS

VERSION = "1"

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


# -- extraction -------------------------------------------------------------------------------------------
def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), with nested braces balanced."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j].strip() or None
    return None


@lru_cache(maxsize=64)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern, ...]:
    return tuple(re.compile(p, re.MULTILINE) for p in patterns)


def clean_answer(ans: str) -> str:
    """Normalise surface forms math-verify does not: thousands separators, a currency sign, a final period."""
    ans = ans.strip().rstrip(".").strip()
    ans = re.sub(r"(?<=\d),(?=\d{3}\b)", "", ans)
    return ans.lstrip("$").strip()


def _marked_answer(text: str, cfg: MathVerifyConfig) -> str | None:
    """An answer the text marks as final: the last \\boxed{}, else the last match of the first pattern
    that matches (group 1 if the pattern has one)."""
    if cfg.boxed and (boxed := last_boxed(text)):
        return boxed
    for pattern in _compiled(tuple(cfg.patterns)):
        matches = list(pattern.finditer(text))
        if matches:
            m = matches[-1]
            value = (m.group(1) if m.groups() else m.group(0)).strip()
            if value:
                return clean_answer(value)
    return None


def extract_answer(text: str | None, cfg: MathVerifyConfig) -> str | None:
    """The candidate's final answer: last \\boxed{}, else the configured patterns, else the last number."""
    if not text:
        return None
    if (marked := _marked_answer(text, cfg)) is not None:
        return marked
    if cfg.last_number and (numbers := _NUMBER.findall(text)):
        return clean_answer(numbers[-1])
    return None


def gold_answer(answer: str | None, cfg: MathVerifyConfig) -> str | None:
    """The gold answer: extracted like a candidate's when it is a worked solution, else taken as is."""
    if answer is None:
        return None
    marked = _marked_answer(answer, cfg)
    return marked if marked is not None else clean_answer(answer)


# -- checking in a killable child ---------------------------------------------------------------------------
@lru_cache(maxsize=4096)
def _parse(ans: str):
    """Parsed once per distinct string: a problem's gold answer is shared by all its candidates."""
    from math_verify import parse

    return parse(_as_latex(ans), parsing_timeout=None)


def check_pair(gold: str, pred: str) -> bool:
    """math-verify's equivalence check, gold first, with its own (SIGALRM) timeouts disabled."""
    from math_verify import verify

    g, p = _parse(gold), _parse(pred)
    return bool(g) and bool(p) and verify(g, p, timeout_seconds=None)


def _as_latex(ans: str) -> str:
    return ans if ans.startswith("$") else f"${ans}$"


def _child_main(fd: int) -> None:
    """Entry of the checker child: ``python -m bonforge.tasks.verify_math <fd>``."""
    import logging

    import math_verify  # noqa: F401  (import once, before the first item arrives)

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns that we disabled its SIGALRM timeout
    conn = Connection(fd)
    conn.send("ready")

    while True:
        try:
            batch = conn.recv()
        except EOFError:
            return
        if batch is None:
            return
        for idx, gold, pred in batch:
            t0 = time.perf_counter()
            try:
                ok, err = check_pair(gold, pred), None
            except Exception as e:  # a verifier crash is the item's verdict, not the stage's failure
                ok, err = False, f"{type(e).__name__}: {e}"[:500]
            conn.send((idx, ok, err, (time.perf_counter() - t0) * 1000))


class HardTimeoutChecker:
    """Checks (gold, pred) pairs in a child process, killing it when one item exceeds ``timeout_s``."""

    def __init__(self) -> None:
        self._proc = None
        self._conn = None

    def _start(self) -> None:
        # A fresh interpreter (not fork): safe inside threaded parents such as Ray workers, and it does not
        # re-import the caller's __main__ the way multiprocessing's spawn does.
        parent, child = socket.socketpair()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bonforge.tasks.verify_math", str(child.fileno())],
            pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
        )
        child.close()
        self._conn = Connection(os.dup(parent.fileno()))
        parent.close()
        # wait for the imports so that start-up time never counts against an item's limit
        if not self._conn.poll(120) or self._conn.recv() != "ready":
            self._kill()
            raise RuntimeError("the math-verify checker process did not start")

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    close = _kill

    def check(self, items: list[tuple[int, str, str]], timeout_s: float) -> dict[int, tuple[str, str | None, float]]:
        """Return ``{idx: (status, error, latency_ms)}`` with status correct | wrong_answer | timeout | error."""
        results: dict[int, tuple[str, str | None, float]] = {}
        remaining = list(items)
        while remaining:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            self._conn.send(remaining)
            while remaining:
                if not self._conn.poll(timeout_s):
                    idx = remaining.pop(0)[0]
                    results[idx] = ("timeout", f"no verdict within {timeout_s:g} s", timeout_s * 1000)
                    self._kill()
                    break
                try:
                    idx, ok, err, ms = self._conn.recv()
                except (EOFError, OSError):  # the child died (e.g. killed by the OOM killer): blame the item in flight
                    idx = remaining.pop(0)[0]
                    results[idx] = ("error", "verifier process died", 0.0)
                    self._kill()
                    break
                assert idx == remaining[0][0]
                remaining.pop(0)
                results[idx] = ("error" if err else ("correct" if ok else "wrong_answer"), err, ms)
        return results


_CHECKER: HardTimeoutChecker | None = None


def _checker() -> HardTimeoutChecker:
    global _CHECKER
    if _CHECKER is None:
        _CHECKER = HardTimeoutChecker()
    return _CHECKER


# -- the stage function --------------------------------------------------------------------------------------
def verify_math(candidates: pa.Table, problems: pa.Table, cfg: MathVerifyConfig) -> pa.Table:
    """VERDICTS for ``candidates`` (a shard) against the gold answers in ``problems``."""
    gold_by_pid = dict(zip(problems.column("problem_id").to_pylist(), problems.column("answer").to_pylist()))
    cids = candidates.column("candidate_id").to_pylist()
    pids = candidates.column("problem_id").to_pylist()
    texts = candidates.column("text").to_pylist()
    extracted = [extract_answer(t, cfg) for t in texts]
    status: list[str] = ["no_answer"] * len(cids)
    detail: list[str | None] = [None] * len(cids)
    latency = [0.0] * len(cids)
    work = []
    for i, (pid, pred) in enumerate(zip(pids, extracted)):
        gold = gold_answer(gold_by_pid.get(pid), cfg)
        if gold is None:
            status[i], detail[i] = "error", f"problem {pid} has no gold answer"
        elif pred is not None:
            work.append((i, gold, pred))
    for i, (st, err, ms) in _checker().check(work, cfg.timeout_s).items():
        status[i], detail[i], latency[i] = st, err, ms
    correct = [s == "correct" for s in status]
    return pa.Table.from_pydict(
        {
            "candidate_id": cids,
            "problem_id": pids,
            "teacher": candidates.column("teacher"),
            "extracted": extracted,
            "correct": correct,
            "reward": [1.0 if c else 0.0 for c in correct],
            "status": status,
            "tests_passed": pa.nulls(len(cids), pa.int32()),
            "tests_total": pa.nulls(len(cids), pa.int32()),
            "detail": detail,
            "latency_ms": latency,
        },
        schema=VERDICTS,
    )


if __name__ == "__main__":
    _child_main(int(sys.argv[1]))
