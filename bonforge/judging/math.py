"""Stage `verdicts` for math, and ``check_answer``: one candidate text against one gold answer, judged by the
rules of ``bonforge.judging.math_rules`` in killable child processes.

math-verify's own timeouts rely on SIGALRM (main thread only) and cannot interrupt some C-level hangs (a
deep power tower makes sympy compute forever). So every check runs in a long-lived child process that the
caller kills on a hard wall-clock limit per item: a killed item gets status ``timeout`` and the work goes
on with a fresh child. Children are started on first use and reused across calls (at most one per CPU,
each serving one caller at a time), so ``check_answer`` is safe from any thread and any process (trainer
reward workers included). A child parses LaTeX with SLL prediction first and full LL only where SLL reports
a syntax error (``_sll_first``): the same trees, a fraction of the CPU.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

import pyarrow as pa

from bonforge.judging.config import MathVerifyConfig
from bonforge.judging.math_rules import MathResult, judge
from bonforge.schema import VERDICTS

VERSION = "6"  # 6: a code block the text ends inside (cut at the token limit) states no answer;
# 5: a pair's word after a negation ("not even") is not stated;
# 4: one-word answers of a closed pair (yes/no, true/false, odd/even) read in plain text and in
# sentences; a one-word reply read as a one-word gold is; a NaN gold ("nan", pandas' missing value) is an error;
# the judge's fingerprint (``bonforge.judging.fingerprint``) in the verdicts key and every verdict's identity

def check_answer(text: str | None, gold: str | None, settings: MathVerifyConfig | None = None,
                 timeout: float | None = None) -> MathResult:
    """Judge the answer in ``text`` (a whole candidate response) against ``gold`` (a plain answer such as
    ``42``, ``\\frac{1}{2}`` or ``[0,1)``, an answer in ``$...$`` or ``\\boxed{}``, or a worked solution
    with such a marker), with the extraction and comparison rules of ``settings`` (default:
    ``MathVerifyConfig()``; a recipe's ``verify.math``).

    Runs in a reused child process killed after ``timeout`` seconds (default ``settings.timeout_s``):
    never raises for any text, never uses signals in the caller; safe from threads and worker processes.
    """
    settings = settings or MathVerifyConfig()
    if gold is None:
        return MathResult("error", detail="the problem has no gold answer")
    if not text:
        return MathResult("no_answer", detail="empty text")
    with _CHECKERS.borrow() as checker:
        return checker.check(settings, [(0, text, gold)], timeout or settings.timeout_s)[0]


# -- checking in a killable child ---------------------------------------------------------------------------
# The child's program: this very bonforge (its root first on sys.path), whatever the caller's cwd holds.
_CHILD = "import sys; sys.path.insert(0, sys.argv[1]); from bonforge.judging.math import _child_main; " \
         "_child_main(int(sys.argv[2]))"


_WARM_UP = [
    (r"so $\frac{1}{2} \leq x$", "[1/2, 3)"), (r"\boxed{\left( 3, \frac{\pi}{2} \right)}", r"(3, \frac{\pi}{2})"),
    (r"$\begin{pmatrix} 1 \\ -2 \end{pmatrix}$", r"\begin{pmatrix} 1 \\ -2 \end{pmatrix}"),
    (r"\boxed{\sqrt{3}+2i}", r"2+i\sqrt3"), (r"\boxed{x^2-4x+4}", "(x-2)^2"), (r"\boxed{\{1, 2\}}", r"\{1,2\}"),
    (r"\boxed{10^\circ}", r"10^{\circ}"), (r"\boxed{\text{(A)}}", r"\text{(A)}"),
    (r"\boxed{\dfrac{5\pi}{4}}", r"\frac{5\pi}{4}"),
    ("The answer is 1,234", "1234"), (r"\boxed{y = 2x + 1}", "y=2x+1"), (r"\boxed{(-\infty, 3]}", r"(-\infty,3]"),
    (r"\boxed{52_8}", "52_8"), (r"\boxed{\$18.90}", r"\$18.90"), (r"\boxed{-2, 1}", "-2,1"),
    (r"\boxed{\log_2 5 + \cos 30}", r"\log_{2}{5}+\cos{30}"),
]


def _sll_first() -> None:
    """Make latex2sympy's ANTLR parser two-stage in this process: SLL prediction first, full LL only where
    SLL reports a syntax error. ANTLR's contract (``antlr4.atn.PredictionMode``): an SLL parse that reports
    no error is the very tree LL builds, so every verdict stays the same; what goes is LL's full-context
    prediction, most of math-verify's CPU on LaTeX answers. Only the checker child calls it; with a
    latex2sympy that builds its parser elsewhere, parsing stays plain LL."""
    from antlr4.atn.PredictionMode import PredictionMode
    from latex2sympy2_extended import latex2sympy2

    make_ll = getattr(getattr(latex2sympy2, "_Latex2Sympy", None), "create_parser", None)
    if make_ll is None or getattr(make_ll, "sll_first", False):
        return

    def create_parser(self, latex: str):
        parser = make_ll(self, latex)
        parser._interp.predictionMode = PredictionMode.SLL
        parse_sll = parser.math

        def math():
            try:
                return parse_sll()
            except Exception:  # latex2sympy's error listener raises on a syntax error: parse again with LL
                return make_ll(self, latex).math()

        parser.math = math
        return parser

    create_parser.sll_first = True
    latex2sympy2._Latex2Sympy.create_parser = create_parser


def _child_main(fd: int) -> None:
    """Entry of the checker child (see ``_CHILD``)."""
    import logging
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches the group: the parent stops us

    import math_verify  # noqa: F401  (import once, before the first item arrives)

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns that we disabled its SIGALRM timeout
    _sll_first()
    cfg_json = MathVerifyConfig().model_dump_json()
    for text, gold in _WARM_UP:  # the LaTeX parser's first sight of each form is slow: never inside an item's limit
        judge(text, gold, cfg_json)
    conn = Connection(fd)
    conn.send("ready")
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        cfg_json, batch = msg
        for idx, text, gold in batch:
            t0 = time.perf_counter()
            try:
                status, extracted, detail = judge(text, gold, cfg_json)
            except Exception as e:  # a verifier crash is the item's verdict, not the stage's failure
                status, extracted, detail = "error", None, f"{type(e).__name__}: {e}"[:500]
            conn.send((idx, status, extracted, detail, (time.perf_counter() - t0) * 1000))


class HardTimeoutChecker:
    """Checks items in one child process, killing it when one item exceeds the time limit. One caller at
    a time (``check_answer`` and the stage borrow checkers from a per-process pool)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None

    def _start(self) -> None:
        # A fresh interpreter (not fork): safe inside threaded parents such as Ray workers, and it does not
        # re-import the caller's __main__ the way multiprocessing's spawn does. It imports the same bonforge.
        parent, child = socket.socketpair()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(Path(__file__).resolve().parents[2]), str(child.fileno())],
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

    def check(self, cfg: MathVerifyConfig, items: list[tuple[int, str, str]],
              timeout_s: float) -> dict[int, MathResult]:
        """``{idx: MathResult}`` for ``items`` = ``[(idx, text, gold), ...]``."""
        cfg_json = cfg.model_dump_json()
        results: dict[int, MathResult] = {}
        remaining = list(items)
        while remaining:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            self._conn.send((cfg_json, remaining))
            while remaining:
                if not self._conn.poll(timeout_s):
                    idx = remaining.pop(0)[0]
                    results[idx] = MathResult("timeout", None, f"no verdict within {timeout_s:g} s", timeout_s * 1000)
                    self._kill()
                    break
                try:
                    idx, status, extracted, detail, ms = self._conn.recv()
                except (EOFError, OSError):  # the child died (e.g. killed by the OOM killer): blame the item in flight
                    idx = remaining.pop(0)[0]
                    results[idx] = MathResult("error", None, "verifier process died")
                    self._kill()
                    break
                assert idx == remaining[0][0]
                remaining.pop(0)
                results[idx] = MathResult(status, extracted, detail, ms)
        return results


class _Checkers:
    """This process's checkers: each caller borrows an idle one (a new one when all are busy, at most one
    per CPU: further callers wait) and gives it back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._idle: list[HardTimeoutChecker] = []
        self._slots = threading.BoundedSemaphore(len(os.sched_getaffinity(0)))

    @contextlib.contextmanager
    def borrow(self):
        with self._lock:
            if self._pid != os.getpid():  # a forked copy: the parent's children are not ours to use
                self._reset()
            slots = self._slots
        with slots:
            with self._lock:
                checker = self._idle.pop() if self._idle else HardTimeoutChecker()
            try:
                yield checker
            except BaseException:
                checker.close()  # interrupted mid-batch: its pipe may hold stale answers
                raise
            with self._lock:
                if self._pid == os.getpid():
                    self._idle.append(checker)


_CHECKERS = _Checkers()


# -- the stage function --------------------------------------------------------------------------------------
def verify_math(candidates: pa.Table, problems: pa.Table, cfg: MathVerifyConfig) -> pa.Table:
    """VERDICTS for ``candidates`` (a shard) against the gold answers in ``problems``."""
    gold_by_pid = dict(zip(problems.column("problem_id").to_pylist(), problems.column("answer").to_pylist()))
    cids = candidates.column("candidate_id").to_pylist()
    pids = candidates.column("problem_id").to_pylist()
    texts = candidates.column("text").to_pylist()
    results: dict[int, MathResult] = {}
    work = []
    for i, (pid, text) in enumerate(zip(pids, texts)):
        gold = gold_by_pid.get(pid)
        if gold is None:
            results[i] = MathResult("error", detail=f"problem {pid} has no gold answer")
        elif not text:
            results[i] = MathResult("no_answer", detail="empty text")
        else:
            work.append((i, text, gold))
    if work:
        with _CHECKERS.borrow() as checker:
            results.update(checker.check(cfg, work, cfg.timeout_s))
    rows = [results[i] for i in range(len(cids))]
    correct = [r.correct for r in rows]
    return pa.Table.from_pydict(
        {
            "candidate_id": cids,
            "problem_id": pids,
            "teacher": candidates.column("teacher"),
            "extracted": [r.extracted for r in rows],
            "correct": correct,
            "reward": [1.0 if c else 0.0 for c in correct],
            "status": [r.status for r in rows],
            "tests_passed": pa.nulls(len(cids), pa.int32()),
            "tests_total": pa.nulls(len(cids), pa.int32()),
            "detail": [r.detail for r in rows],
            "latency_ms": [r.latency_ms for r in rows],
        },
        schema=VERDICTS,
    )
