"""Stage ``rounds``: exact early stopping (``filter.early_stop``). Sampling runs in rounds over the problems
whose filter outcome is still open; each round's ``rounds`` table says, per problem and teacher, how many
samples it holds after the round (``draws``), and a problem is closed once it is certain to be dropped as too
easy. The driver (``bonforge.flows.rounds``) samples and verifies each round with the ordinary stages.

Only "too easy" is decided early: a problem is dropped as too easy when more than ``max_pass_rate`` of all its
samples are right, and once ``correct / N > max_pass_rate`` over the samples drawn so far (``N``: the samples a
build without early stop draws), no later sample can bring it back. A problem with no right sample so far may
still get one, so "too hard" is never decided early. Kept problems always get all their samples.

A problem's samples are drawn in one fixed order, its teachers interleaved by share (with equal ``n``: one of
each in turn). Each round draws, per open problem, the fewest next samples that could close it (``T - c``
where ``T`` is the least number right that is too easy, ``c`` those right so far), so a problem stops exactly
where drawing one sample at a time in that order would: the saving is the whole exact potential. A problem that
can no longer reach ``T`` draws all the rest at once. From round ``MAX_ROUNDS`` on, every open problem draws
all the rest (a bound on the rounds: each is a smaller engine batch, and where a teacher's engine
cannot be held across them, ``bonforge.llm.held``, a model load).

A verdict without a label (``schema.NO_LABEL``: the sandbox or the machine failed, not the candidate) is
unknown, neither right nor wrong, and the rule needs no more: it closes a problem on its right samples alone and
asks for ``T - c`` more (all the rest when fewer are left), so how the others split between wrong and unknown
changes nothing. Such a sample is judged again whenever its problem and teacher draw more (a verdict without a
label is never reused), and once more by the final verification.

Sample ``k`` of a problem is the same text whatever the round: its seed is the problem's seed plus ``k`` and its
identity the same as in a build without early stop (``bonforge.stages.sample``), so the samples are taken from
(and later given to) other builds by row reuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bonforge.config import FilterConfig
from bonforge.schema import ROUNDS
from bonforge.stage import Inputs, Node, Params, Ref, Stage, Written

VERSION = "1"
MAX_ROUNDS = 8


def interleaved(ns: tuple[int, ...]) -> list[int]:
    """The order in which a problem's samples are drawn: the teacher (position) of each, sample ``i`` of a
    teacher with ``n`` samples at ``(i + 1) / n`` of the way (ties: recipe order)."""
    slots = [(Fraction(i + 1, n), t) for t, n in enumerate(ns) for i in range(n)]
    return [t for _, t in sorted(slots)]


def threshold(total: int, cfg: FilterConfig) -> int | None:
    """The fewest right samples of ``total`` that make a problem too easy (``right / total > max_pass_rate``,
    the filter's own test), or None when no number can (or the problem is too few candidates anyway)."""
    if total < cfg.min_candidates:
        return None
    return next((c for c in range(total + 1) if c / total > cfg.max_pass_rate), None)


def advance(order: list[int], drawn: list[int], caps: list[int], k: int) -> list[int]:
    """Per teacher, the samples held after drawing the next ``k`` of ``order`` (teachers at their cap
    skipped)."""
    seen, out = [0] * len(drawn), list(drawn)
    for t in order:
        if k <= 0:
            break
        seen[t] += 1
        if seen[t] > drawn[t] and seen[t] <= caps[t]:
            out[t] += 1
            k -= 1
    return out


def decide(drawn: list[int], correct: list[int], caps: list[int], order: list[int], cfg: FilterConfig,
           round_: int) -> tuple[list[int], bool]:
    """One problem: the samples each teacher holds after this round, and whether the problem is closed as too
    easy (then it draws nothing more)."""
    total, right, held = sum(caps), sum(correct), sum(drawn)
    need = threshold(total, cfg)
    if need is not None and right >= need:
        return list(drawn), True
    if held >= total or need is None or right + (total - held) < need or round_ >= MAX_ROUNDS:
        return list(caps), False  # it cannot close early (or the rounds are spent): all the rest
    return advance(order, drawn, caps, need - right), False


def plan(state: pa.Table, teachers: tuple[tuple[str, int], ...], filter_cfg: FilterConfig, round_: int) -> pa.Table:
    """The ``rounds`` rows of round ``round_`` from ``state`` (one row per problem and teacher: ``n``, ``drawn``,
    ``correct``, ``stopped_early``, problems in order): what each teacher holds after it."""
    position = {name: i for i, (name, _) in enumerate(teachers)}
    order_of: dict[tuple[int, ...], list[int]] = {}
    cols = {c: state.column(c).to_pylist() for c in ("problem_id", "teacher", "n", "drawn", "correct",
                                                     "stopped_early")}
    out: dict[str, list] = {f.name: [] for f in ROUNDS}
    at, rows = 0, state.num_rows
    while at < rows:
        end = at
        while end < rows and cols["problem_id"][end] == cols["problem_id"][at]:
            end += 1
        ts = sorted(range(at, end), key=lambda r: position[cols["teacher"][r]])
        caps = [cols["n"][r] for r in ts]
        drawn = [cols["drawn"][r] for r in ts]
        correct = [cols["correct"][r] for r in ts]
        stopped = cols["stopped_early"][at]
        if stopped:
            draws = drawn
        else:
            full = tuple(n for _, n in teachers)
            order = order_of.setdefault(full, interleaved(full))
            draws, stopped = decide(drawn, correct, caps, order, filter_cfg, round_)
        for r, d in zip(ts, draws):
            for name in ("problem_id", "teacher", "n", "drawn", "correct"):
                out[name].append(cols[name][r])
            out["draws"].append(d)
            out["stopped_early"].append(stopped)
            out["round"].append(round_)
        at = end
    return pa.table(out, schema=ROUNDS)


def _state(i: Inputs) -> pa.Table:
    """Each problem and teacher before this round: the first round from the problems, a later one from the
    previous round's table and the verdicts of the samples it drew. A teacher that got fewer samples than it
    asked for (the engine skipped its prompt) keeps those: a build without early stop holds no more."""
    if "previous" not in i:
        return _first(i, i.params)
    counted = ("(SELECT problem_id, teacher, count(*) AS held, count(*) FILTER (WHERE correct) AS ok "
               "FROM verdicts GROUP BY problem_id, teacher)" if "verdicts" in i else
               "(SELECT NULL::VARCHAR AS problem_id, NULL::VARCHAR AS teacher, 0 AS held, 0 AS ok LIMIT 0)")
    return i.sql(f"""
        SELECT r.problem_id, r.teacher,
               (CASE WHEN r.draws > r.drawn AND coalesce(v.held, 0) < r.draws THEN coalesce(v.held, 0)
                     ELSE r.n END)::INTEGER AS n,
               (CASE WHEN r.draws > r.drawn THEN coalesce(v.held, 0) ELSE r.drawn END)::INTEGER AS drawn,
               (CASE WHEN r.draws > r.drawn THEN coalesce(v.ok, 0) ELSE r.correct END)::INTEGER AS correct,
               r.stopped_early
        FROM previous r LEFT JOIN {counted} v USING (problem_id, teacher)
        ORDER BY r.problem_id, r.teacher""")


def _first(i: Inputs, p: "RoundParams") -> pa.Table:
    ids = i.sql("SELECT DISTINCT problem_id FROM problems ORDER BY problem_id").column("problem_id")
    k = len(p.teachers)
    return pa.table({
        "problem_id": pa.array(np.repeat(np.array(ids.to_pylist(), dtype=object), k), pa.string()),
        "teacher": pa.array([t for t, _ in p.teachers] * len(ids), pa.string()),
        "n": pa.array([n for _, n in p.teachers] * len(ids), pa.int32()),
        "drawn": pa.array(np.zeros(k * len(ids), np.int32)),
        "correct": pa.array(np.zeros(k * len(ids), np.int32)),
        "stopped_early": pa.array(np.zeros(k * len(ids), bool)),
    })


def _compute(state: pa.Table, teachers: tuple[tuple[str, int], ...], filter_cfg: FilterConfig,
             round_: int) -> pa.Table:
    return plan(state, teachers, filter_cfg, round_)


def _summary(w: Written) -> dict:
    """What the driver reads: per teacher the samples this round draws (none: the rounds are over), and the
    problems closed so far."""
    t = w.read(["problem_id", "teacher", "drawn", "draws", "stopped_early"])
    grow = pc.greater(t.column("draws"), t.column("drawn"))
    sampling = {}
    for name, g, d, h in zip(t.column("teacher").to_pylist(), grow.to_pylist(), t.column("draws").to_pylist(),
                             t.column("drawn").to_pylist()):
        if g:
            sampling[name] = sampling.get(name, 0) + d - h
    stopped = t.filter(t.column("stopped_early")).column("problem_id")
    return {"round": w.node.params.round_, "sampling": sampling,
            "stopped_early": len(pc.unique(stopped)), "samples_held": sum(t.column("drawn").to_pylist())}


@dataclass(frozen=True)
class RoundParams(Params):
    teachers: tuple[tuple[str, int], ...]  # (name, n) of every sampled teacher, in recipe order
    filter_cfg: FilterConfig
    round_: int

    def key_config(self) -> dict:
        return {"teachers": [list(t) for t in self.teachers], "max_pass_rate": self.filter_cfg.max_pass_rate,
                "min_candidates": self.filter_cfg.min_candidates, "round": self.round_,
                "max_rounds": MAX_ROUNDS}


STAGE = Stage("rounds", VERSION, params=RoundParams, schema=ROUNDS, compute=_compute, table=_state,
              summary=_summary, shard_rows=1_000_000)


def node(teachers: list, filter_cfg: FilterConfig, problems: Ref, previous: Ref | None = None,
         verdicts: list[Ref] | None = None) -> Node:
    """Round 1 from ``problems``; round r + 1 from round r's table (``previous``) and the verdicts of what it
    drew."""
    round_ = 1 if previous is None else previous.manifest.extra["round"] + 1
    params = RoundParams(tuple((t.name, t.n) for t in teachers), filter_cfg, round_)
    return STAGE.bind(params, {"problems": problems, "previous": previous, "verdicts": verdicts or None},
                      label=f"rounds[{round_}]")
