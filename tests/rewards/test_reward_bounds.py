"""Every reward call, in both calling conventions, on generated hostile responses: it returns a float in
range, within its documented bound, and never raises (docs/training.md, "How long a reward call takes").

Responses are built from pieces a degenerate policy repeats (runs of whitespace, fences, judgments, open
brackets, digits, NUL bytes, lone surrogates) up to ``MAX_CHARS``. The code reward runs here without
Docker through its whole host path (rows grouped into problems, specs, program extraction, the verdict)
on a pool that answers at once; tests/rewards/test_reward_bounds_docker.py runs the real sandbox.
"""

from __future__ import annotations

import functools
import json
import time
from unittest import mock

from hypothesis import HealthCheck, example, given, settings, strategies as st

from bonforge.config import MathVerifyConfig
from bonforge.rewards import code, genselect, math as math_reward

MAX_CHARS = 1_000_000  # past any trainer's max response length (1 MB ~ 250K tokens)
PIECES = [" ", "\t", "\n", "\r\n", "\u2003", "```", "```python\n", "```py", "~~~", "\n```\n", "Judgment:",
          "Judgment: ", "**", "-", "9", "٣", "<think>", "</think>", "\\boxed{", "}", "[", "{", "(", "\\frac{",
          "$", "A: ", "\x00", "\ud800", "\udfff", "\ufeff", "print(1)\n", "def f(x):\n    return x\n"]  # fmt: skip
REPEATS = [1, 2, 3, 40, 3_000, 200_000]
BLOCK = st.tuples(st.sampled_from(PIECES), st.sampled_from(REPEATS))
ANY_CHAR = st.characters(exclude_categories=())  # lone surrogates included


@st.composite
def responses(draw, max_chars: int = MAX_CHARS) -> str:
    blocks = draw(st.lists(st.one_of(BLOCK, st.tuples(st.text(ANY_CHAR, max_size=30), st.just(1))), max_size=8))
    return "".join(piece * n for piece, n in blocks)[:max_chars]


def linear_bound_s(text: str) -> float:
    """What a host-side reward step may take: about 0.3 s per MB measured on an idle core (docs), allowed
    ten times that on a loaded CI machine. The quadratic scans this replaces took 31-37 s at 40-200K."""
    return 1.0 + 3.0 * len(text) / 1e6


def messages(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.data_too_large])  # fmt: skip


# -- GenSelect ------------------------------------------------------------------------------------------------
@PROPERTY
@given(responses(), st.sampled_from([None, 1, 4, 16]))
@example("Judgment:" + " " * 200_000, 4)  # the judgment pattern was quadratic here (40K: 31 s)
@example("Judgment: " + "9" * 5_000, None)  # int() raised past 4,300 digits
def test_genselect_reward_is_bounded_and_total(text, n):
    t0 = time.perf_counter()
    out = genselect.compute_score("bonforge/x", text, "[1, 3]", {"n_candidates": n}, invalid_score=-1.0)
    trl = genselect.genselect_reward([None] * 2, [text, messages(text)], [{"ground_truth": "[1, 3]"}] * 2,
                                     extra_info=[{"n_candidates": n}] * 2, invalid_score=-1.0)  # fmt: skip
    assert time.perf_counter() - t0 < 3 * linear_bound_s(text)
    assert type(out["score"]) is float and out["score"] in (-1.0, 0.0, 1.0)
    assert trl == [out["score"]] * 2


# -- code: the host path ----------------------------------------------------------------------------------
SPEC = json.dumps({"kind": "stdio", "tests": [{"input": "", "output": "1\n"}, {"input": "x", "output": "2\n"}]})


class InstantPool:
    """Answers every request at once: each test 'prints' the program's first line."""

    def run(self, requests: list[dict]) -> list[dict]:
        first_line = [r["program"].split("\n")[0] for r in requests]
        return [{"results": [{"status": "ok", "stdout": out, "wall_s": 0.0} for _ in r["tests"]], "latency_s": 0.0}
                for r, out in zip(requests, first_line)]  # fmt: skip


@functools.cache
def warm() -> None:
    """The first call imports what verification needs (seconds): not part of any call's bound."""
    with mock.patch.object(code, "shared_pool", lambda cfg: InstantPool()):
        code.compute_score("d", "print(1)", SPEC, None)


@PROPERTY
@given(responses(), st.sampled_from(["auto", "fenced", "raw"]))
@example("```" + " " * 200_000, "auto")  # the open-block pattern was quadratic here (36.7 s)
@example("\ud800", "raw")  # raised UnicodeEncodeError
def test_code_reward_host_path_is_bounded_and_total(text, extraction):
    warm()
    info = {"problem_id": "p", "question": "Print 1.", "verify": json.dumps({"extraction": extraction})}
    with mock.patch.object(code, "shared_pool", lambda cfg: InstantPool()):
        t0 = time.perf_counter()
        out = code.compute_score("bonforge/x", text, SPEC, info)
        trl = code.code_reward([None] * 2, [text, messages(text)], [{"ground_truth": SPEC}] * 2,
                               extra_info=[info] * 2)  # fmt: skip
        elapsed = time.perf_counter() - t0
    assert elapsed < 3 * linear_bound_s(text)
    assert type(out["score"]) is float and 0.0 <= out["score"] <= 1.0
    assert trl == [out["score"]] * 2


def test_code_reward_with_a_lone_surrogate_is_judged():
    """A surrogate outside the program is harmless; inside it the program is judged as written with
    U+FFFD in its place (it raised UnicodeEncodeError from rewards/code.py)."""
    with mock.patch.object(code, "shared_pool", lambda cfg: InstantPool()):
        ok = code.compute_score("d", "Here\ud800:\n```python\n1\n```\n", SPEC, {"problem_id": "p"})
        bad = code.compute_score("d", "```python\n\ud800\n```\n", SPEC, {"problem_id": "p"})
    assert (ok["score"], bad["score"], bad["status"]) == (0.5, 0.0, "wrong_answer")


# -- math -----------------------------------------------------------------------------------------------------
SETTINGS = {"verify": json.dumps(MathVerifyConfig().key_config())}
TIMEOUT_S = 1.0
START_ALLOWANCE_S = 30.0  # a fresh checker process after a kill (about 3 s idle), on a loaded machine


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(responses(max_chars=50_000))
def test_math_reward_is_bounded_and_total(text):
    t0 = time.perf_counter()
    out = math_reward.compute_score("d", text, "42", SETTINGS, timeout_s=TIMEOUT_S)
    assert time.perf_counter() - t0 < TIMEOUT_S + START_ALLOWANCE_S + linear_bound_s(text)
    assert type(out["score"]) is float and out["score"] in (0.0, 1.0)
    assert out["status"] in ("correct", "wrong_answer", "no_answer", "timeout", "error")


def test_math_trl_reward_on_hostile_batch():
    texts = ["\ud800" * 10, "\x00" * 1000, "9" * 5000, "\\frac{" * 3000, "Judgment:" + " " * 40_000, r"\boxed{42}"]
    t0 = time.perf_counter()
    scores = math_reward.math_reward([None] * len(texts), [messages(t) for t in texts],
                                     [{"ground_truth": "42"}] * len(texts), extra_info=[SETTINGS] * len(texts),
                                     timeout_s=TIMEOUT_S)  # fmt: skip
    assert time.perf_counter() - t0 < len(texts) * (TIMEOUT_S + START_ALLOWANCE_S)
    assert scores == [0.0] * 5 + [1.0]
