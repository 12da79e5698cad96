"""Stage `verdicts` for math, and ``check_answer``: one candidate text against one gold answer.

Both the answer and the gold are read by math-verify itself (``parse`` with its LaTeX and expression
extraction, boxed answers first by default), and compared by ``verify(gold, pred)``, gold first. A recipe's
regexes (GSM8K's ``A: x``) come before math-verify's extraction where the recipe names them; the last
number of a text without LaTeX is a fallback only where math-verify finds nothing.

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
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from multiprocessing.connection import Connection
from pathlib import Path

import pyarrow as pa

from bonforge.config import MathVerifyConfig
from bonforge.schema import VERDICTS

VERSION = "4"  # 4: one-word answers of a closed pair (yes/no, true/false, odd/even) read in plain text and in
# sentences; a one-word reply read as a one-word gold is; a NaN gold ("nan", pandas' missing value) is an error;
# the judge's fingerprint (``bonforge.judging.fingerprint``) in the verdicts key and every verdict's identity

MAX_EXTRACTED_CHARS = 1000  # the verdict row keeps at most this much of the extracted answer


@dataclass(frozen=True)
class MathResult:
    """The verdict on one answer.

    ``status``: ``correct`` | ``wrong_answer`` | ``no_answer`` (nothing to compare was found) | ``timeout``
    (killed at the hard limit) | ``error`` (unreadable gold answer, or the verifier failed).
    ``extracted``: the answer as math-verify read it (its string form), or None.
    ``detail``: why the status is not ``correct`` / ``wrong_answer``, else None.
    """

    status: str
    extracted: str | None = None
    detail: str | None = None
    latency_ms: float = 0.0

    @property
    def correct(self) -> bool:
        return self.status == "correct"


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


# -- reading answers (runs in the child) ---------------------------------------------------------------------
# A lone number by math-verify's expression rules, optionally with a currency sign, a percent sign or unit
# words ("12 apples"): read as plain text, where "2,74" is 2.74 and "1 000" is 1000 (in $...$ they would be
# the set {2, 74} and the product 1*0).
_PLAIN_NUMBER = re.compile(
    r"[$€£¥]?\s*[-+]?(?:[1-9]\d{0,2}(?:[ ,]\d{3})+(?:\.\d+)?|\d+(?:[.,]\d+)?|\.\d+)"
    r"\s*(?:%|[Pp]ercent)?(?:\s+[A-Za-z]{2,})*\s*\.?"
)
_LATEX_MARKUP = re.compile(r"\$[^$]+\$|\\\(|\\\[|\\boxed")
_COMMANDS = re.compile(r"\\(?:text|mathrm|textbf|mbox|operatorname|begin|end)\s*\{[^{}]*\}|\\[A-Za-z]+")
# "2,74" reads as 2.74 in plain text and as the pair {2, 74} in LaTeX: such a gold answer accepts both
_COMMA_PAIR = re.compile(r"[-+]?\d+,\d+")
_THOUSANDS = re.compile(r"[-+]?[1-9]\d{0,2}(?:,\d{3})+")
_WORD = re.compile(r"(?<![A-Za-z])(?!(?:and|or)\b)[A-Za-z]{2,}")  # an English word, not a variable or \command
_FORMULA = re.compile(r"(?:\\.|[\w\s+\-*/^=<>()\[\]{}|,.!'&])+")  # no ':', '#', '?', ... ("A: 4" is text)
_ONE_WORD = re.compile(r"[A-Za-z]+")
# One-word answers that come in a closed pair: against such a gold, a text's answer is the pair's word it
# states, wherever it is stated (a recipe pattern's value, a box, else the last sentence naming one, preferring
# what follows "answer" in a sentence); a place naming both words of the pair states none
_PAIRS = {w: pair for pair in (("yes", "no"), ("true", "false"), ("odd", "even")) for w in pair}
_GOLD_WORD = re.compile(r"(?:\\boxed\{|\\text\{)*([A-Za-z]+)\}*\.?")  # of a stripped gold: no blanks to trade
_SENTENCES = re.compile(r"[^.!?;\n]+")
_MISSING_GOLD = {"nan", "<na>", "nat"}  # what pandas writes for a missing value: never a gold answer
_LAST_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


# Writing that math-verify misreads, rewritten the same way in candidate texts and gold answers before anything
# reads them (recipe patterns included)
_REWRITES = [
    (re.compile("\u2212"), "-"),  # the Unicode minus sign: math-verify finds no number in "−5"
    (re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))"), ""),  # 10\,000: math-verify reads 10{,}000 but not 10\,000
    (re.compile(r"\\(?:fbox|boxed)\s*\{"), r"\\boxed{"),  # \fbox{7} and \boxed {7} are answer boxes too
    (re.compile(r"(?<![\w*])\*\*(?=\S)([^*\n]+?)(?<=\S)\*\*(?![\w*])"), r"\1"),  # Markdown bold: **42** is 42
    # a sentence's full stop after a number: math-verify reads "7/3." as 7/3.0, a float unequal to 7/3
    (re.compile(r"(?<=\d)\.(?=\s|$|\$|\\[)\]])"), ""),
    (re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[eE]([+-]?\d{1,3})(?![\w.])"), r"\1*10^(\2)"),  # 3.2e5: it reads 3.2
]


def _normalised(text: str) -> str:
    for pattern, repl in _REWRITES:
        text = pattern.sub(repl, text)
    return text


@dataclass(frozen=True, eq=False)  # one per settings (``_rules`` is cached): hashed by identity
class _Rules:
    patterns: tuple[re.Pattern, ...]
    targets: tuple  # math-verify extraction configs
    choices: bool
    last_number: bool
    verify_kw: dict


@lru_cache(maxsize=16)
def _rules(cfg_json: str) -> _Rules:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, StringExtractionConfig

    cfg = MathVerifyConfig.model_validate_json(cfg_json)
    if cfg.choices:
        targets = (StringExtractionConfig(strings=tuple(cfg.choices)),)
    else:
        targets = (LatexExtractionConfig(boxed_match_priority=cfg.boxed_match_priority), ExprExtractionConfig())
    return _Rules(
        patterns=tuple(re.compile(p, re.MULTILINE) for p in cfg.patterns),
        targets=targets,
        choices=bool(cfg.choices),
        last_number=cfg.last_number and not cfg.choices,
        verify_kw={"float_rounding": cfg.float_rounding, "numeric_precision": cfg.numeric_precision,
                   "strict": cfg.strict, "allow_set_relation_comp": cfg.allow_set_relation_comp},
    )


def _mv_parse(text: str, rules: _Rules) -> list:
    """math-verify's ``parse``; short strings (answers, gold, captured values) once each."""
    return _mv_parse_short(text, rules) if len(text) <= MAX_EXTRACTED_CHARS else _mv_parse_any(text, rules)


def _mv_parse_any(text: str, rules: _Rules) -> list:
    from math_verify import parse

    return parse(text, rules.targets, parsing_timeout=None)


_mv_parse_short = lru_cache(maxsize=8192)(_mv_parse_any)


def _pattern_answer(text: str, rules: _Rules) -> tuple[int, str] | None:
    """(pattern number, value) of the last match of the first recipe pattern that matches."""
    for n, pattern in enumerate(rules.patterns, 1):
        m = None
        for m in pattern.finditer(text):  # noqa: B007  (the last match is the one kept)
            pass
        if m is not None:
            value = (m.group(1) if m.groups() else m.group(0)) or ""
            if value.strip():
                return n, value.strip()
    return None


def _parse_answer(answer: str, rules: _Rules) -> list:
    """An answer on its own (a plain gold answer, a value a recipe pattern captured, a one-line reply),
    read the way math-verify reads gold: text with LaTeX markup or words, or a lone number, as text; a
    bare formula as LaTeX (``\\frac{\\sqrt{3}}{2}``, ``[0,1)``, ``x >= 5``, ``3, 5, 7``, ``x=5 or x=-3``)."""
    answer = answer.strip()
    if (rules.choices or _LATEX_MARKUP.search(answer) or not _FORMULA.fullmatch(answer)
            or _PLAIN_NUMBER.fullmatch(answer) or _WORD.search(_COMMANDS.sub(" ", answer))):
        return _mv_parse(answer, rules)
    return _mv_parse(f"${answer}$", rules) or _mv_parse(answer, rules)


@lru_cache(maxsize=4096)
def _parse_gold(gold: str, cfg_json: str) -> list:
    """Parsed once per distinct gold answer (worked solutions too): a problem's candidates share it."""
    rules = _rules(cfg_json)
    gold = _normalised(gold)
    hit = _pattern_answer(gold, rules)
    answer = (hit[1] if hit else gold).strip()
    parsed = _parse_answer(answer, rules)
    if not rules.choices and _COMMA_PAIR.fullmatch(answer) and not _THOUSANDS.fullmatch(answer):
        parsed = parsed + _mv_parse(f"${answer}$", rules)
    if not parsed and not rules.choices and _ONE_WORD.fullmatch(answer):  # "yes": math-verify reads \text{yes}
        parsed = _mv_parse(f"$\\text{{{answer}}}$", rules)
    return parsed


def _pair_words(text: str, pair: tuple[str, str]) -> set[str]:
    return {m.lower() for m in re.findall(rf"(?<![A-Za-z])(?:{pair[0]}|{pair[1]})(?![A-Za-z])", text, re.IGNORECASE)}


def _last_box(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (braces balanced, at most 1,000 characters), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, min(len(text), i + MAX_EXTRACTED_CHARS)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def _judge_word(text: str, word: str, rules: _Rules) -> tuple[str, str | None, str | None]:
    """(status, extracted, detail) of a text against a gold of a closed pair (``_PAIRS``)."""
    pair = _PAIRS[word]
    places = [hit[1] for hit in [_pattern_answer(text, rules)] if hit] + [b for b in [_last_box(text)] if b]
    found = next((w for w in map(lambda p: _pair_words(p, pair), places) if w), set())
    if not found:  # the last sentence saying "answer ..." with a word of the pair after it, else the last naming one
        sentences = [s for s in _SENTENCES.findall(text) if _pair_words(s, pair)]
        cued = [w for s in sentences if (i := s.lower().rfind("answer")) >= 0 and (w := _pair_words(s[i:], pair))]
        found = cued[-1] if cued else _pair_words(sentences[-1], pair) if sentences else set()
    if len(found) != 1:
        return "no_answer", None, (f"the answer says both {pair[0]!r} and {pair[1]!r}" if found
                                   else f"no {pair[0]}/{pair[1]} answer in the text")  # fmt: skip
    said = found.pop()
    return ("correct" if said == word else "wrong_answer"), said, None


def _gold_word(gold: str, rules: _Rules) -> str | None:
    """The gold's word when it is one of a closed pair (``yes``, ``\\boxed{No}``, ``\\text{True}``), else None."""
    if rules.choices:
        return None
    hit = _pattern_answer(gold, rules)
    m = _GOLD_WORD.fullmatch((hit[1] if hit else gold).strip())
    return m.group(1).lower() if m and m.group(1).lower() in _PAIRS else None


def _shown(parsed: list) -> str:
    """math-verify's string form of what it extracted (the matched text, normalised)."""
    text = next((p for p in reversed(parsed) if isinstance(p, str)), None)
    return (text if text is not None else str(parsed[0]))[:MAX_EXTRACTED_CHARS]


def _extract(text: str, rules: _Rules) -> tuple[list, str | None]:
    """(parsed answer, why there is none)."""
    hit = _pattern_answer(text, rules)
    if hit:
        parsed = _parse_answer(hit[1], rules)
        return parsed, None if parsed else f"math-verify cannot read {hit[1][:200]!r} (matched by pattern {hit[0]})"
    one_line = "\n" not in text.strip() and len(text) <= MAX_EXTRACTED_CHARS
    if parsed := (_parse_answer(text, rules) if one_line else _mv_parse(text, rules)):
        return parsed, None
    if one_line and not rules.choices and _ONE_WORD.fullmatch(word := text.strip().rstrip(".")):
        return _mv_parse(f"$\\text{{{word}}}$", rules), None  # a one-word reply, read as a one-word gold is
    latex = "\\" in text or "$" in text
    if rules.last_number and not latex and (numbers := _LAST_NUMBER.findall(text)):
        return _mv_parse(numbers[-1], rules), None
    what = "no recipe pattern matched and " if rules.patterns else ""
    what += "math-verify found no " + ("choice letter" if rules.choices else "answer") + " in the text"
    if rules.last_number and latex:
        what += " (the last-number fallback skips texts with LaTeX)"
    return [], what


def judge(text: str, gold: str, cfg_json: str) -> tuple[str, str | None, str | None]:
    """(status, extracted, detail) of one item, without any time limit: call it only in a killable child."""
    from math_verify import verify

    rules = _rules(cfg_json)
    if gold.strip().lower() in _MISSING_GOLD:
        return "error", None, f"the gold answer {gold.strip()!r} is a missing value, not an answer"
    if (word := _gold_word(_normalised(gold), rules)) is not None:
        return _judge_word(_normalised(text), word, rules)
    gold_parsed = _parse_gold(gold, cfg_json)
    if not gold_parsed:
        return "error", None, f"math-verify cannot read the gold answer {gold[:200]!r}"
    pred, why = _extract(_normalised(text), rules)
    if not pred:
        return "no_answer", None, why
    key = (gold, cfg_json, _exact_form(pred))  # a problem's candidates often give the same answer: verified once
    ok = _VERIFIED.get(key)
    if ok is None:
        ok = verify(gold_parsed, pred, timeout_seconds=None, **rules.verify_kw)
        if len(_VERIFIED) >= 65536:
            _VERIFIED.clear()
        _VERIFIED[key] = ok
    return ("correct" if ok else "wrong_answer"), _shown(pred), None


_VERIFIED: dict[tuple, bool] = {}


def _exact_form(parsed: list) -> tuple:
    """What ``verify`` sees of a parsed answer, exactly (sympy's ``srepr`` keeps types and assumptions)."""
    from sympy import srepr

    return tuple(p if isinstance(p, str) else srepr(p) for p in parsed)


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
