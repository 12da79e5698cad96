"""Stage `genselect`: selection prompts from the candidates of kept problems (GenSelect seed recipe).

Per problem, up to ``prompts_per_problem`` prompts are drawn by seeded resampling. Each prompt holds
between ``min_candidates`` and ``max_candidates`` candidates, at least one correct and at most
``max_correct_fraction`` of them correct; the composition is checked on every prompt, not on the pool.
A prompt with the same set of candidates as an earlier one is a duplicate and is not kept. Candidates
whose response is longer than ``max_candidate_tokens`` never enter a prompt (the seed recipe's 12K cut);
prompts longer than ``max_tokens`` are dropped. The label is the list of 0-based indices of the correct candidates, in
prompt order; the selector answers ``Judgment: <index>``. Templates and token counts: ``bonforge.selection.prompts``.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bonforge.selection import judged_pool
from bonforge.tables import trajectories
from bonforge.config import GenSelectConfig, Recipe
from bonforge.tables.ordering import sort_by
from bonforge.selection.draws import SMALL, draw_many
from bonforge.selection.prompts import UNRELIABLE, key_config, render_many, template_text, token_counter, token_counts
from bonforge.schema import GENSELECT
from bonforge.stage import Inputs, Node, Params, Ref, Stage, Written

VERSION = "1"
def check_prompts(sizes: np.ndarray, n_correct: np.ndarray, cfg: GenSelectConfig) -> None:
    """The per-prompt composition rule over prompts of ``sizes`` candidates of which ``n_correct`` are
    correct; raises AssertionError naming the first prompt that breaks it."""
    rules = [((sizes < cfg.min_candidates) | (sizes > cfg.max_candidates), "{m} candidates"),
             (n_correct < 1, "no correct candidate"),
             (n_correct > np.floor(cfg.max_correct_fraction * sizes), "{c} of {m} correct")]
    for bad, what in rules:
        if bad.any():
            i = int(np.argmax(bad))
            raise AssertionError(what.format(m=sizes[i], c=n_correct[i]))


@lru_cache(maxsize=4096)
def feasible_sizes(n_correct: int, n_wrong: int, cfg: GenSelectConfig) -> tuple[tuple[int, int], ...]:
    """All (size, n_correct_in_prompt) pairs a prompt may have given the pool."""
    out = []
    for m in range(cfg.min_candidates, min(cfg.max_candidates, n_correct + n_wrong) + 1):
        for c in range(1, min(n_correct, math.floor(cfg.max_correct_fraction * m)) + 1):
            if m - c <= n_wrong:
                out.append((m, c))
    return tuple(out)


@lru_cache(maxsize=4096)
def _menu(n_correct: int, n_wrong: int, cfg: GenSelectConfig) -> tuple[list[int], dict[int, list[int]]]:
    """The prompt sizes a pool allows, ascending, and for each size the numbers of correct candidates."""
    by_m: dict[int, list[int]] = {}
    for m, c in feasible_sizes(n_correct, n_wrong, cfg):
        by_m.setdefault(m, []).append(c)
    return sorted(by_m), by_m


def _draws(rng: random.Random, correct: list[int], wrong: list[int], ids: list, cfg: GenSelectConfig):
    """A problem's distinct candidate draws (row numbers in prompt order), in the order they are drawn:
    each draw picks a size, a number of correct candidates, the candidates and their order; a draw of a
    set of candidates drawn before is skipped; at most 8 draws per prompt wanted."""
    ms, by_m = _menu(len(correct), len(wrong), cfg)
    seen: set[frozenset] = set()
    for _ in range(cfg.prompts_per_problem * 8):
        m = rng.choice(ms)
        c = rng.choice(by_m[m])
        chosen = rng.sample(correct, c) + rng.sample(wrong, m - c)
        rng.shuffle(chosen)
        key = frozenset(ids[r] for r in chosen)
        if key not in seen:
            seen.add(key)
            yield chosen


def _rest(seed: str, t: pa.Table, lo: int, n: int, ok: np.ndarray, correct: np.ndarray, cfg: GenSelectConfig,
          skip: int):
    """The draws of the problem of rows ``lo`` to ``lo + n`` after its first ``skip`` ones (drawn one problem
    at a time; only where a problem needs more, so what it takes is gathered here)."""
    rows = np.flatnonzero(ok[lo:lo + n]) + lo
    good, bad = rows[correct[rows]].tolist(), rows[~correct[rows]].tolist()
    ids = dict(zip(range(lo, lo + n), t.column("candidate_id").slice(lo, n).to_pylist()))
    yield from itertools.islice(_draws(random.Random(seed), good, bad, ids, cfg), skip, None)


def _problem_draws(t: pa.Table, first: np.ndarray, length: np.ndarray, ok: np.ndarray, correct: np.ndarray,
                   cfg: GenSelectConfig, seed: int) -> dict:
    """Each problem's draws (problem number -> an iterator of row lists, for problems that allow a prompt):
    the first ones of all problems side by side (``selection.draws``), the rest one problem at a time, each
    from the generator seeded by the problem's name."""
    problem = np.repeat(np.arange(len(first)), length)
    good_rows, bad_rows = np.flatnonzero(ok & correct), np.flatnonzero(ok & ~correct)
    nc = np.bincount(problem[good_rows], minlength=len(first))
    nw = np.bincount(problem[bad_rows], minlength=len(first))
    pairs = np.stack([nc, nw], axis=1)
    shapes, shape = np.unique(pairs, axis=0, return_inverse=True)
    feasible = np.array([bool(feasible_sizes(a, b, cfg)) for a, b in shapes.tolist()], dtype=bool)[shape.ravel()]
    cid = t.column("candidate_id").combine_chunks()
    repeats = np.zeros(len(first), dtype=bool)  # the draws are sets of ids: ids seen twice need the slow path
    if len(cid) > 1:
        same = pc.equal(cid[1:], cid[:-1]).to_numpy(zero_copy_only=False)
        repeats[problem[1:][same & (problem[1:] == problem[:-1])]] = True
    side = np.flatnonzero(feasible & (nc <= SMALL) & (nw <= SMALL) & ~repeats)
    names = t.column("problem_id").take(pa.array(first)).to_pylist()

    def padded(rows: np.ndarray, n: np.ndarray) -> np.ndarray:
        out = np.full((len(first), SMALL), -1, dtype=np.int64)
        fit = n[problem[rows]] <= SMALL
        rows = rows[fit]
        rank = np.arange(len(rows)) - np.r_[0, np.cumsum(np.where(n <= SMALL, n, 0))][problem[rows]]
        out[problem[rows], rank] = rows
        return out[side]

    want = cfg.prompts_per_problem
    found, n_found, used = draw_many([f"{seed}/{names[g]}" for g in side.tolist()], padded(good_rows, nc),
                                     padded(bad_rows, nw), nc[side], nw[side], lambda a, b: _menu(a, b, cfg),
                                     want * 8, want)
    draws = {}
    heads_at = dict(zip(side.tolist(), range(len(side))))
    heads = dict(zip(side.tolist(), zip(found.tolist(), n_found.tolist())))
    for g in np.flatnonzero(feasible).tolist():
        rows, k = heads.get(g, ((), 0))
        head = [[r for r in row if r >= 0] for row in rows[:k]]
        if k and used[heads_at[g]] >= want * 8:
            draws[g] = iter(head)
        else:
            rest = _rest(f"{seed}/{names[g]}", t, int(first[g]), int(length[g]), ok, correct, cfg, len(head))
            draws[g] = itertools.chain(head, rest)
    return draws


def _strip(texts: pa.Array) -> pa.Array:
    """``str.strip()`` of each text (null: ""), in Arrow: ASCII whitespace is trimmed at once; the few texts
    that then begin or end with a non-ASCII or separator character (which Python may count as
    whitespace) are stripped by Python."""
    out = pc.fill_null(pc.ascii_trim_whitespace(texts), "")
    ends = pc.utf8_slice_codeunits(out, 0, 1), pc.utf8_slice_codeunits(out, -1, 1 << 30)
    edges = pc.binary_join_element_wise(*ends, "")
    odd = pc.or_(pc.invert(pc.string_is_ascii(edges)), pc.match_substring_regex(edges, "[\x1c-\x1f]"))
    if pc.any(odd).as_py():
        fixed = [t.strip() for t in texts.filter(odd).to_pylist()]
        out = pc.replace_with_mask(out, odd, pa.array(fixed, out.type))
    return out


def _eligible(t: pa.Table, first: np.ndarray, length: np.ndarray, cfg: GenSelectConfig):
    """(which rows may enter a prompt: a reliable verdict, a non-blank text within
    ``max_candidate_tokens``; the texts stripped; how many rows were left out for length only)."""
    domain = t.column("domain").take(pa.array(np.repeat(first, length)))  # each problem's first row's
    unreliable = pa.repeat(False, t.num_rows)
    for d, bad in UNRELIABLE.items():
        here = pc.and_(pc.equal(domain, d), pc.is_in(t.column("status"), pa.array(sorted(bad), pa.string())))
        unreliable = pc.or_(unreliable, pc.fill_null(here, False))
    ok = ~unreliable.to_numpy(zero_copy_only=False)
    stripped = _strip(t.column("text").combine_chunks()).cast(pa.large_string())
    ok &= pc.binary_length(stripped).to_numpy(zero_copy_only=False) > 0
    if cfg.max_candidate_tokens is None:
        return ok, stripped, 0
    rows = pa.array(np.flatnonzero(ok))
    long = np.zeros(t.num_rows, dtype=bool)
    long[rows.to_numpy()] = token_counts(cfg, t.column("text").take(rows)) > cfg.max_candidate_tokens
    return ok & ~long, stripped, int(long.sum())


def assemble(pool: pa.Table, cfg: GenSelectConfig, seed: int) -> pa.Table:
    """GENSELECT rows from ``pool``: one row per candidate of a kept problem with columns problem_id,
    question, domain, candidate_id, text, correct, status (a shard of whole problems). The numbers of
    prompts and of candidates left out for length are in the schema metadata, keys ``dropped_too_long``
    and ``candidates_too_long``."""
    t = sort_by(pool, ["problem_id", "candidate_id"])
    pid = t.column("problem_id").combine_chunks()
    first = np.flatnonzero(np.r_[True, pc.not_equal(pid[1:], pid[:-1]).to_numpy(zero_copy_only=False)]) \
        if len(pid) else np.zeros(0, dtype=np.int64)
    length = np.diff(np.r_[first, len(pid)])
    ok, texts, candidates_too_long = _eligible(t, first, length, cfg)
    correct = t.column("correct").to_numpy(zero_copy_only=False).astype(bool)
    draws = _problem_draws(t, first, length, ok, correct, cfg, seed)
    questions = pa.array([q.strip() for q in t.column("question").take(pa.array(first)).to_pylist()], pa.large_string())
    problem, chosen, prompts, n_tokens, too_long = _rounds(draws, questions, texts, cfg)
    schema = GENSELECT.with_metadata({"dropped_too_long": str(too_long),
                                      "candidates_too_long": str(candidates_too_long)})
    if not chosen:
        return pa.Table.from_pylist([], schema=schema)
    sizes = np.array([len(c) for c in chosen], dtype=np.int64)
    flat = np.fromiter(itertools.chain.from_iterable(chosen), dtype=np.int64, count=int(sizes.sum()))
    offsets = np.r_[0, np.cumsum(sizes)]
    flags = correct[flat]
    n_correct = np.add.reduceat(flags.astype(np.int64), offsets[:-1])
    check_prompts(sizes, n_correct, cfg)
    start = np.flatnonzero(np.r_[True, problem[1:] != problem[:-1]])
    index = np.arange(len(problem)) - np.repeat(start, np.diff(np.r_[start, len(problem)]))
    problem_id = pid.take(pa.array(first[problem]))
    position = np.arange(len(flat)) - np.repeat(offsets[:-1], sizes)
    candidate_ids = t.column("candidate_id").take(pa.array(flat)).combine_chunks()
    columns = [
        pc.binary_join_element_wise(problem_id, pa.array(index).cast(pa.string()), "#"),
        problem_id,
        pa.array(index, pa.int32()),
        pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), candidate_ids, type=schema.field("candidate_ids").type),
        pa.array(sizes, pa.int32()),
        pa.ListArray.from_arrays(pa.array(np.r_[0, np.cumsum(n_correct)], pa.int32()),
                                 pa.array(position[flags], pa.int32()), type=schema.field("correct_indices").type),
        prompts,
        pa.array(n_tokens, pa.int32()),
        pa.repeat(pa.scalar(token_counter(cfg)[1], pa.string()), len(problem)),
    ]
    return pa.Table.from_arrays(columns, schema=schema)


_RENDER, _RENDER_BYTES = 2048, 16 << 20  # prompts rendered (or gathered) at once: at most this many, and bytes


def _runs(need: np.ndarray) -> Iterator[slice]:
    """Consecutive runs of items of ``need`` bytes each: at most _RENDER items holding at most _RENDER_BYTES
    (an item alone where it passes the bound). Rendering and gathering copy a run's texts a few times: their
    memory then follows the bytes, not the number of prompts."""
    total = np.r_[0, np.cumsum(need)]
    lo = 0
    while lo < len(need):
        fit = int(np.searchsorted(total, total[lo] + _RENDER_BYTES, "right")) - 1  # the last end within the bytes
        hi = min(len(need), lo + _RENDER, max(lo + 1, fit))
        yield slice(lo, hi)
        lo = hi


def _gather(prompts: pa.ChunkedArray, order: np.ndarray) -> pa.ChunkedArray:
    """``prompts.take(order)``, a run at a time from the chunks that hold it (a chunked array's ``take`` joins
    all of its chunks first: a copy of every prompt of the shard)."""
    starts = np.r_[0, np.cumsum([len(c) for c in prompts.chunks])]
    sizes = pc.binary_length(prompts).to_numpy().astype(np.int64)[order]
    out = []
    for run in _runs(sizes):
        rows = order[run]
        chunk = np.searchsorted(starts, rows, "right") - 1
        by = np.argsort(chunk, kind="stable")
        parts = [prompts.chunk(k).take(pa.array(rows[by][chunk[by] == k] - starts[k])) for k in np.unique(chunk)]
        out.append(pa.concat_arrays(parts).take(pa.array(np.argsort(by))))
    return pa.chunked_array(out, prompts.type)


def _render_batch(template: str, questions: pa.Array, texts: pa.Array, of: np.ndarray, batch: list) -> pa.Array:
    offsets = pa.array(np.r_[0, np.cumsum([len(c) for _, c in batch])].astype(np.int32))
    flat = pa.array(np.fromiter(itertools.chain.from_iterable(c for _, c in batch), dtype=np.int64))
    return render_many(template, questions.take(pa.array(of)), pa.ListArray.from_arrays(offsets, texts.take(flat)))


def _rounds(draws: dict, questions: pa.Array, texts: pa.Array, cfg: GenSelectConfig):
    """The kept prompts of every problem, from its ``draws`` (problem number -> ``_draws``), as (problem
    number, row numbers, prompt, token count of each, the number dropped for ``max_tokens``), in problem
    and draw order; the prompts a chunked array, one chunk per rendered batch (no copy of them all).

    Each round takes as many draws of each problem as it still lacks; then all of the round's prompts are
    rendered and counted, a bounded batch at a time. A problem whose prompts all fit is done; one that lost
    some draws again in the next round. So the draws and what is kept are those of drawing and checking one
    prompt at a time, stopping at ``prompts_per_problem``."""
    template, want = template_text(cfg), cfg.prompts_per_problem
    sizes = pc.binary_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
    kept = dict.fromkeys(draws, 0)
    problem, chosen, prompts, n_tokens, too_long = [], [], [], [], 0
    while draws:
        batch = [(g, c) for g, gen in draws.items() for c in itertools.islice(gen, want - kept[g])]
        if not batch:
            break
        of_all = np.array([g for g, _ in batch], dtype=np.int64)
        lost = []
        lengths = np.fromiter((len(c) for _, c in batch), dtype=np.int64, count=len(batch))
        flat = np.fromiter(itertools.chain.from_iterable(c for _, c in batch), dtype=np.int64, count=int(lengths.sum()))
        need = np.add.reduceat(sizes[flat], np.r_[0, np.cumsum(lengths)[:-1]])  # each prompt's candidate bytes
        for part in _runs(need):
            of, rows = of_all[part], batch[part]
            rendered = _render_batch(template, questions, texts, of, rows)
            counts = token_counts(cfg, rendered)
            fits = counts <= cfg.max_tokens
            for g in of[fits].tolist():
                kept[g] += 1
            too_long += int((~fits).sum())
            lost.append(of[~fits])
            if not fits.all():
                keep = np.flatnonzero(fits)
                of, counts, rows = of[keep], counts[keep], [rows[i] for i in keep]
                rendered = rendered.take(pa.array(keep))
            problem.append(of)
            chosen.extend(c for _, c in rows)
            prompts.append(rendered.cast(pa.string()))
            n_tokens.append(counts)
        draws = {g: draws[g] for g in sorted(set(np.concatenate(lost).tolist()))}
    if not chosen:
        return np.zeros(0, dtype=np.int64), [], None, None, too_long
    problem, n_tokens, prompts = np.concatenate(problem), np.concatenate(n_tokens), pa.chunked_array(prompts)
    if (problem[1:] < problem[:-1]).any():  # later rounds after earlier ones: draw order
        order = np.argsort(problem, kind="stable")
        problem, chosen, prompts = problem[order], [chosen[i] for i in order.tolist()], _gather(prompts, order)
        n_tokens = n_tokens[order]
    return problem, chosen, prompts, n_tokens, too_long


_POOL = {"problem_id": "candidates", "question": "problems", "domain": "problems", "candidate_id": "candidates",
         "text": "candidates", "correct": "verdicts", "status": "verdicts"}


def _pool(i: Inputs) -> Iterator[pa.Table]:
    """The kept problems' candidates with their texts, verdicts and questions, in chunks of whole problems; a
    trajectory's text is its compact form (``trajectories.compact``: its calls and their outputs, then the
    answer). Changing that form changes prompts: bump VERSION with it."""
    if not trajectories.any_in(i):
        return judged_pool.chunks(i, _POOL)
    return (_compacted(t) for t in judged_pool.chunks(i, {**_POOL, "messages": "candidates"}))


def _compacted(t: pa.Table) -> pa.Table:
    texts = [trajectories.compact(m) if m is not None else x
             for m, x in zip(t.column("messages").to_pylist(), t.column("text").to_pylist())]
    return t.set_column(t.column_names.index("text"), "text", pa.array(texts, pa.string())).drop_columns(["messages"])


def _dropped_too_long(w: Written) -> dict:
    """Prompts over ``genselect.max_tokens`` and candidates over ``genselect.max_candidate_tokens``, summed
    from the shards' metadata."""
    notes = list(w.shard_metadata())
    return {"prompts_dropped_too_long": sum(int(m.get(b"dropped_too_long", 0)) for m in notes),
            "candidates_dropped_too_long": sum(int(m.get(b"candidates_too_long", 0)) for m in notes)}


@dataclass(frozen=True)
class AssembleParams(Params):
    cfg: GenSelectConfig
    seed: int

    def key_config(self) -> dict:
        return key_config(self.cfg, self.seed)


# shards of 50,000 candidates, fewer where their texts and questions pass 64 MB
STAGE = Stage("genselect", VERSION, params=AssembleParams, schema=GENSELECT, compute=assemble, stream=_pool,
              shard_rows=50_000, shard_bytes=64 << 20, summary=_dropped_too_long)


def node(recipe: Recipe, problems: Ref, candidates: list[Ref], verdicts: list[Ref], stats: Ref) -> Node:
    return STAGE.bind(AssembleParams(recipe.genselect, recipe.seed),
                      {"problems": problems, "problem_stats": stats, "candidates": candidates, "verdicts": verdicts})
