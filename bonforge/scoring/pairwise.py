"""Pairwise judging: the labels a judge gives two answers shown as A and B, how two games of the same pair
(shown in both orders, because judges favour a position) combine, and the win rate with a seeded bootstrap
interval over prompts.

Labels are arena-hard's: ``[[A>>B]] [[A>B]] [[A=B]] [[B>A]] [[B>>A]]``; the **last** one in the reply counts
(reasoning may quote the format, or an answer's own label, first; a label in quotation marks after it is a
quote, not the verdict), read case-insensitively. Per game the
contender's score is 1 (its answer judged better), 0.5 (a tie) or 0. A game without a verdict has a status
saying why: ``truncated`` (the reply was cut at its token limit: no label is read from it, whatever it holds,
since it may end quoting an answer that carries a label of its own), ``no_label`` (a complete reply without
one) or ``no_reply`` (a prompt the engine could not serve); such games are counted per status and never
reused (a later build asks again). Per prompt the two games give the outcome: ``win`` / ``loss`` / ``tie``
when both agree, ``inconsistent`` when they point opposite ways (the position decided: scored 0.5), ``split``
when one is a tie and the other decisive (scored 0.25 or 0.75), and ``invalid`` when a game has no label
(left out of the rate, counted). Win rate = mean prompt score = (W + T/2)/n where the orders agree."""

from __future__ import annotations

import re

import numpy as np

from bonforge.scoring.base import last_verdict

LABELS = ("A>>B", "A>B", "A=B", "B>A", "B>>A")
_LABEL = re.compile(r"\[\[\s*(A>>B|A>B|A=B|B>A|B>>A)\s*\]\]")
_A_SCORE = {"A>>B": 1.0, "A>B": 1.0, "A=B": 0.5, "B>A": 0.0, "B>>A": 0.0}  # the score of the answer shown as A
_READ = 20_000
FAILED = ("truncated", "no_label", "no_reply")  # a game's status where the judge gave no verdict


def parse_label(reply: str, answers: str = "") -> tuple[str | None, int]:
    """The last label of ``reply`` (upper-cased first) that the judged ``answers`` do not carry and that
    stands outside quotation marks (``last_verdict``), and how many distinct labels it holds."""
    label, found = last_verdict(_LABEL, reply[-_READ:].upper(), answers.upper())
    return label, len(set(found))


def read_reply(reply, answers: str = "") -> tuple[str | None, int, str]:
    """(label, distinct labels, status) of a judge's reply (a ``Completion``, or None where the engine served
    no reply) to a game between ``answers`` (both texts, joined)."""
    if reply is None:
        return None, 0, "no_reply"
    label, distinct = parse_label(reply.text, answers)
    if reply.finish_reason == "length":
        return None, distinct, "truncated"
    return label, distinct, "ok" if label else "no_label"


def contender_score(label: str | None, contender_is_a: bool) -> float | None:
    if label is None:
        return None
    a = _A_SCORE[label]
    return a if contender_is_a else 1.0 - a


def outcome(first: float | None, second: float | None) -> tuple[str, float | None]:
    """The prompt's outcome and score from the contender's scores in its two games."""
    if first is None or second is None:
        return "invalid", None
    if first == second:
        return {1.0: "win", 0.5: "tie", 0.0: "loss"}[first], first
    if {first, second} == {0.0, 1.0}:
        return "inconsistent", 0.5
    return "split", (first + second) / 2


def win_rate(scores: list[float], rounds: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """The mean prompt score and its percentile bootstrap interval (prompts resampled, both games of a prompt
    staying together since a prompt has one score)."""
    if not scores:
        return {"n": 0, "win_rate": None, "ci_low": None, "ci_high": None}
    values = np.asarray(scores, float)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(rounds, len(values)))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    return {"n": len(values), "win_rate": float(values.mean()), "ci_low": float(np.percentile(means, tail)),
            "ci_high": float(np.percentile(means, 100 - tail))}


def summary(games: list[dict], cfg) -> dict:
    """The games of one contender against one baseline (rows: problem_id, game, label, contender_score and,
    where read, status): outcome counts per prompt, the invalid games per status, the win rate with its
    interval (``cfg``: bootstrap_rounds, seed, level), the share of inconsistent prompts, and how often the
    answer shown first (A) won a decisive game."""
    per: dict[str, dict[int, float | None]] = {}
    first_won = decisive = 0
    failed = {k: 0 for k in FAILED}
    for r in games:
        per.setdefault(r["problem_id"], {})[r["game"]] = r["contender_score"]
        if r.get("status") in failed:
            failed[r["status"]] += 1
        if r["label"] in ("A>>B", "A>B", "B>A", "B>>A"):
            decisive += 1
            first_won += r["label"].startswith("A>")
    counts = {k: 0 for k in ("win", "tie", "loss", "inconsistent", "split", "invalid")}
    scores = []
    for g in per.values():
        kind, score = outcome(g.get(0), g.get(1))
        counts[kind] += 1
        if score is not None:
            scores.append(score)
    rate = win_rate(scores, cfg.bootstrap_rounds, cfg.seed, cfg.level)
    valid = len(scores)
    return {**counts, **rate, "invalid_games": failed,
            "inconsistent_rate": counts["inconsistent"] / valid if valid else None,
            "first_shown_wins": first_won / decisive if decisive else None}
