"""Stage ``verdicts``: one per candidates stage, by math-verify (``verify_math``) or in the code sandbox
(``verify_code``), chosen by the problems' domain. The candidates are read in problem_id order a bounded
batch at a time (streamed); shards of 256 candidates (at most a sampling shard's: ``node``) run as Ray tasks;
readers get files of 100,000 verdicts.

A verdict's content identity (``bonforge.identity``) is the verification settings, the judge's fingerprint
(``bonforge.judging.fingerprint``: its sources, the verifier libraries' versions, for code the backend), the
problem's domain, its gold answer (math) or test spec and question (code: what extraction and the judge
read) and the candidate's text: a verdict on the same text by the same judge under the same settings is
taken from the store, not judged again. The fingerprint is in the stage key too. Never reused:
``sandbox_error`` and ``infra_error`` (the sandbox, the problem or the machine failed, not the candidate:
``schema.NO_LABEL``) and ``timeout``, maths and code alike (a verifier
killed, or a program stopped, at a limit that is wholly or partly wall-clock time, which a busy machine
reaches sooner)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from bonforge import identity
from bonforge.judging import code as verify_code
from bonforge.judging import math as verify_math
from bonforge.judging.fingerprint import fingerprint
from bonforge.config import MathVerifyConfig, Recipe
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.schema import NO_LABEL, VERDICTS
from bonforge.stage import Inputs, Node, Params, Ref, Rows, Stage, unkeyed


def _only(candidates: pa.Table, todo: pa.Table | None) -> pa.Table:
    """The candidates still to judge (all of them without ``todo``)."""
    if todo is None:
        return candidates
    return candidates.filter(pc.is_in(candidates.column("candidate_id"), value_set=todo.column("candidate_id")))


class Judged:
    """Verdicts this build judged already, beside the engine (early stopping without rounds,
    ``bonforge.flows.early``), lent to the verdicts stages that then write them: by candidate id, the judged
    text's digest and the verdict row (a candidate whose text differs is judged)."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[str, dict]] = {}

    def add(self, candidates: pa.Table, verdicts: pa.Table) -> None:
        digest = dict(zip(candidates.column("candidate_id").to_pylist(), candidates.column("text_digest").to_pylist()))
        for row in verdicts.to_pylist():
            self.rows[row["candidate_id"]] = (digest[row["candidate_id"]], row)

    def split(self, candidates: pa.Table) -> tuple[pa.Table, pa.Table | None]:
        """The candidates still to judge, and the verdicts lent for the others (None: none)."""
        digests = (candidates.column("text_digest").to_pylist() if "text_digest" in candidates.column_names
                   else [None] * candidates.num_rows)
        found = [d is not None and c in self.rows and self.rows[c][0] == d
                 for c, d in zip(candidates.column("candidate_id").to_pylist(), digests)]
        if not any(found):
            return candidates, None
        lent = [self.rows[c][1] for c, f in zip(candidates.column("candidate_id").to_pylist(), found) if f]
        return candidates.filter(pa.array([not f for f in found])), pa.Table.from_pylist(lent, schema=VERDICTS)


def _judged(candidates: pa.Table, known: Judged | None, judge) -> pa.Table:
    """``judge(candidates)`` over those ``known`` has no verdict for, with the verdicts it lends."""
    todo, lent = (candidates, None) if known is None else known.split(candidates)
    parts = [judge(todo)] if todo.num_rows or lent is None else []
    parts += [lent] if lent is not None else []
    return pa.concat_tables([t.cast(VERDICTS) for t in parts]) if len(parts) > 1 else parts[0]


# Progress (``Stage.reports``) is counted here, round the judges, whose sources are in the verdicts' identity
# (``bonforge.judging.fingerprint``): counting it inside them would judge every stored verdict again.
PIECE = 32  # with progress: maths candidates sent to the checker at once, counted after each piece


def _verify_math(candidates: pa.Table, problems: pa.Table, cfg, todo: pa.Table | None = None,
                 progress=None, known: Judged | None = None) -> pa.Table:
    """With ``progress``: the candidates ``PIECE`` at a time (the checker keeps its process and its cache of
    verdicts between pieces), counted after each."""
    return _judged(_only(candidates, todo), known, lambda c: _math_pieces(c, problems, cfg, progress))


def _math_pieces(candidates: pa.Table, problems: pa.Table, cfg, progress) -> pa.Table:
    if progress is None or candidates.num_rows <= PIECE:
        return verify_math.verify_math(candidates, problems, cfg)
    parts = []
    for start in range(0, candidates.num_rows, PIECE):
        parts.append(verify_math.verify_math(candidates.slice(start, PIECE), problems, cfg))
        progress(start + parts[-1].num_rows, candidates.num_rows)
    return pa.concat_tables(parts)


class _Counted:
    """A sandbox pool that tells ``progress(done, of)`` of each outcome (``of``: the candidates; identical
    programs run once and a program that is not found runs not at all, so the count may stop short of them
    until the shard is written)."""

    def __init__(self, pool, progress, of: int):
        self.pool, self.progress, self.of, self.done = pool, progress, of, 0
        self.streams_outcomes = getattr(pool, "streams_outcomes", False)
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        return getattr(self.pool, name)

    def _count(self, n: int) -> None:
        with self._lock:
            self.done += n
            done = self.done
        self.progress(min(done, self.of), self.of)

    def run(self, requests: list[dict], on_outcome=None) -> list[dict]:
        if on_outcome is None:
            out = self.pool.run(requests)
            self._count(len(requests))
            return out

        def each(i: int, outcome: dict) -> dict:
            kept = on_outcome(i, outcome)
            self._count(1)
            return kept

        return self.pool.run(requests, each)


def _verify_code(candidates: pa.Table, problems: pa.Table, cfg: CodeVerifyConfig,
                 todo: pa.Table | None = None, progress=None, known: Judged | None = None) -> pa.Table:
    """Inside Ray: the node's shared sandbox pool (one per node for all workers); else this process's."""
    return _judged(_only(candidates, todo), known, lambda c: _in_sandbox(c, problems, cfg, progress))


def _in_sandbox(candidates: pa.Table, problems: pa.Table, cfg: CodeVerifyConfig, progress) -> pa.Table:
    from bonforge.sandbox.ray_pool import pool_for

    pool = pool_for(cfg)
    if progress is not None:
        pool = _Counted(pool, progress, candidates.num_rows)
    return verify_code.verify_code(problems, candidates, cfg, pool=pool)


def _rows(kind: str, version: str, volatile: tuple[str, ...]) -> Rows:
    def ids(candidates: pa.Table, context: dict, params: VerifyParams) -> pa.Table:
        cfg = {"kind": kind, "cfg": params.cfg.key_config()}
        digest = identity.settings("verdict", {**cfg, "version": version, "judge": params.judge()})
        problems = context["problems"]
        if kind == "math":
            gold = problems.column("answer")
        else:
            gold = pa.array([json.dumps([t, q]) for t, q in zip(problems.column("tests").to_pylist(),
                                                                 problems.column("question").to_pylist())])
        no_gold = pc.is_null(gold)  # its verdict names the problem: never another problem's
        gold = pc.if_else(no_gold, pc.binary_join_element_wise("no gold: ", problems.column("problem_id"), ""), gold)
        parts = pa.table({"problem_id": problems.column("problem_id"), "domain": problems.column("domain"),
                          "gold": gold})
        # base_id: the identity without the judge (its fingerprint and declared version): a stored verdict with
        # the same base_id and another row_id is the one this judge re-judges (``Rows.labels``)
        row_id, base_id = identity.verdict_id_sets([digest, identity.settings("verdict", cfg)], parts, candidates)
        return pa.table({"candidate_id": candidates.column("candidate_id"), "row_id": row_id, "base_id": base_id,
                         "problem_id": candidates.column("problem_id"), "teacher": candidates.column("teacher")})

    return Rows("candidate_id", ids, ("extracted", "correct", "reward", "status", "tests_passed", "tests_total",
                                      "detail", "latency_ms"), VERDICTS, {"status": volatile},
                labels=("status", "correct"))


@dataclass(frozen=True)
class VerifyParams(Params):
    cfg: MathVerifyConfig | CodeVerifyConfig
    known: Judged | None = unkeyed(None)  # verdicts judged already in this build (``Judged``)

    def judge(self) -> str:
        """The judge's fingerprint (``bonforge.judging.fingerprint``): its sources, the verifier libraries'
        versions, for code the backend that runs programs (an execution setting that still decides verdicts)."""
        if isinstance(self.cfg, CodeVerifyConfig):
            return fingerprint("code", self.cfg.backend, self.cfg.image, self.cfg.build_image)
        return fingerprint("math")

    def key_config(self) -> dict:
        return {"settings": self.cfg.key_config(), "judge": self.judge()}


# What judging and the verdict identity read (and each program's ``language``, see ``_candidates``): not the
# reasoning, token counts or the problems' metadata.
JUDGED = {"candidates": ["candidate_id", "problem_id", "teacher", "text"],
           "problems": ["problem_id", "domain", "question", "answer", "tests"]}


def _candidates(i: Inputs) -> Iterator[pa.Table]:
    """The candidates in problem_id order, a bounded batch of bytes at a time (never the whole table), with
    each text's ``text_digest`` and the ``language`` its record names, where candidates outputs have them."""
    columns = i.columns("candidates")
    extra = [c for c in ("text_digest", "language") if c in columns]  # outputs written before these lack them
    with i.aligned({"candidates": JUDGED["candidates"] + extra}) as chunks:
        for chunk in chunks:
            yield chunk["candidates"]


_SHARDS = dict(params=VerifyParams, executor="ray", shard_rows=256, compact_rows=100_000, stream=_candidates,
               stream_of="candidates", reports=True,
               context=lambda i: {"problems": i.read("problems", JUDGED["problems"])})
MATH = Stage("verdicts", verify_math.VERSION, schema=VERDICTS, compute=_verify_math,
             rows=_rows("math", verify_math.VERSION, ("timeout",)), **_SHARDS)
CODE = Stage("verdicts", verify_code.VERSION, schema=VERDICTS, compute=_verify_code,
             rows=_rows("code", verify_code.VERSION, (*NO_LABEL, "timeout")), **_SHARDS)


def node(recipe: Recipe, problems: Ref, candidates: Ref, domains: set[str], known: Judged | None = None) -> Node:
    """The verdicts of one candidates stage; ``domains``: those of the problems; ``known``: see ``Judged``."""
    stage, cfg = (CODE, recipe.verify.code) if domains == {"code"} else (MATH, recipe.verify.math)
    teacher = candidates.extra.get("teacher", "")
    return stage.bind(VerifyParams(cfg, known), {"problems": problems, "candidates": candidates},
                      label=f"verdicts[{teacher}]", note={"teacher": teacher},
                      shard_rows=_shard_rows(stage, recipe, teacher))


MIN_SHARD_ROWS = 64  # a shard's fixed costs (its task, its file; a second shard starts Ray): not for fewer


def _shard_rows(stage: Stage, recipe: Recipe, teacher: str) -> int:
    """The stage's shard rows, or fewer: a shard holds at most one sampling shard's candidates (``shard_problems``
    x ``n`` of a sampled teacher; ``MIN_SHARD_ROWS`` at least), so that in a streaming build each sampling shard is
    verified once written, not once the next ones make up a shard (the last ones' wait after the sampling would
    be the build's tail)."""
    t = next((t for t in recipe.teachers if t.name == teacher), None)
    problems = getattr(t, "shard_problems", None)
    return min(stage.shard_rows, max(MIN_SHARD_ROWS, problems * t.n)) if problems else stage.shard_rows
