"""Stage `genselect`: selection prompts from the candidates of kept problems (GenSelect seed recipe).

Per problem, up to ``prompts_per_problem`` prompts are drawn by seeded resampling. Each prompt holds
between ``min_candidates`` and ``max_candidates`` candidates, at least one correct and at most
``max_correct_fraction`` of them correct; the composition is checked on every prompt, not on the pool.
A prompt with the same set of candidates as an earlier one is a duplicate and is not kept. Candidates
whose response is longer than ``max_candidate_tokens`` never enter a prompt (the seed recipe's 12K cut);
prompts longer than ``max_tokens`` are dropped. The label is the list of 0-based indices of the correct candidates, in
prompt order; the selector answers ``Judgment: <index>``.

Token counts come from the configured tokenizer (a ``tokenizer.json`` file or a local model directory).
Without one, the estimate is ceil(UTF-8 bytes / 3): BPE vocabularies of current LLMs average 3.5–4.5
bytes per token on English, maths and code, so the estimate over-counts and never lets an over-long
prompt through.
"""

from __future__ import annotations

import hashlib
import math
import random
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from bonforge import templates
from bonforge.config import GenSelectConfig, Recipe
from bonforge.schema import GENSELECT
from bonforge.stage import Inputs, Node, Ref, Stage, Written

VERSION = "1"
# Verdicts that say nothing about the candidate (the checker failed): such candidates never enter a prompt.
UNRELIABLE = {"math": {"timeout", "error"}, "code": {"sandbox_error"}}


def template_text(cfg: GenSelectConfig) -> str:
    return templates.load(cfg.template, "genselect.txt", ("{question}", "{candidates}"), "genselect.template")


def key_config(cfg: GenSelectConfig, seed: int) -> dict:
    """Config in the stage key: the template's text (not its path) and the tokenizer's identity."""
    out = cfg.key_config()
    out["template"] = hashlib.sha256(template_text(cfg).encode()).hexdigest()
    out["seed"] = seed
    return out


@lru_cache(maxsize=4)
def _tokenizer(spec: str):
    path = Path(spec)
    if path.is_file():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path))
        return lambda text: len(tok.encode(text).ids)
    if (path / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        return lambda text: len(tok.encode(text).ids)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    return lambda text: len(tok.encode(text))


def token_counter(cfg: GenSelectConfig):
    if cfg.tokenizer:
        return _tokenizer(cfg.tokenizer), f"tokenizer:{Path(cfg.tokenizer).name}"
    return (lambda text: math.ceil(len(text.encode("utf-8")) / 3)), "estimate"


def render(template: str, question: str, texts: list[str]) -> str:
    blocks = "\n\n".join(f"### Candidate {i}\n{t.strip()}" for i, t in enumerate(texts))
    return template.format(question=question.strip(), candidates=blocks, n=len(texts), last_index=len(texts) - 1)


def check_prompt(correct_flags: list[bool], cfg: GenSelectConfig) -> None:
    """The per-prompt composition rule; raises AssertionError when violated."""
    m, c = len(correct_flags), sum(correct_flags)
    assert cfg.min_candidates <= m <= cfg.max_candidates, f"{m} candidates"
    assert c >= 1, "no correct candidate"
    assert c <= math.floor(cfg.max_correct_fraction * m), f"{c} of {m} correct"


def feasible_sizes(n_correct: int, n_wrong: int, cfg: GenSelectConfig) -> list[tuple[int, int]]:
    """All (size, n_correct_in_prompt) pairs a prompt may have given the pool."""
    out = []
    for m in range(cfg.min_candidates, min(cfg.max_candidates, n_correct + n_wrong) + 1):
        for c in range(1, min(n_correct, math.floor(cfg.max_correct_fraction * m)) + 1):
            if m - c <= n_wrong:
                out.append((m, c))
    return out


def problem_prompts(pid: str, question: str, correct: list[tuple[str, str]], wrong: list[tuple[str, str]],
                    cfg: GenSelectConfig, template: str, count, seed: int) -> tuple[list[dict], int]:
    """Prompts for one problem from its (candidate_id, text) lists; returns (rows, n dropped for length)."""
    sizes = feasible_sizes(len(correct), len(wrong), cfg)
    if not sizes:
        return [], 0
    by_m: dict[int, list[int]] = {}
    for m, c in sizes:
        by_m.setdefault(m, []).append(c)
    rng = random.Random(f"{seed}/{pid}")
    seen: set[frozenset] = set()
    rows, too_long = [], 0
    for _ in range(cfg.prompts_per_problem * 8):
        if len(rows) == cfg.prompts_per_problem:
            break
        m = rng.choice(sorted(by_m))
        c = rng.choice(by_m[m])
        chosen = [(cid, t, True) for cid, t in rng.sample(correct, c)]
        chosen += [(cid, t, False) for cid, t in rng.sample(wrong, m - c)]
        rng.shuffle(chosen)
        ids = frozenset(cid for cid, _, _ in chosen)
        if ids in seen:
            continue
        seen.add(ids)
        flags = [ok for _, _, ok in chosen]
        check_prompt(flags, cfg)
        prompt = render(template, question, [t for _, t, _ in chosen])
        n_tokens = count(prompt)
        if n_tokens > cfg.max_tokens:
            too_long += 1
            continue
        idx = len(rows)
        rows.append({
            "prompt_id": f"{pid}#{idx}",
            "problem_id": pid,
            "prompt_index": idx,
            "candidate_ids": [cid for cid, _, _ in chosen],
            "n_candidates": m,
            "correct_indices": [i for i, ok in enumerate(flags) if ok],
            "prompt": prompt,
            "n_tokens": n_tokens,
        })
    return rows, too_long


def assemble(pool: pa.Table, cfg: GenSelectConfig, seed: int) -> pa.Table:
    """GENSELECT rows from ``pool``: one row per candidate of a kept problem with columns problem_id,
    question, domain, candidate_id, text, correct, status (a shard of whole problems). The numbers of
    prompts and of candidates left out for length are in the schema metadata, keys ``dropped_too_long``
    and ``candidates_too_long``."""
    template = template_text(cfg)
    count, counter_name = token_counter(cfg)
    t = pool.sort_by([("problem_id", "ascending"), ("candidate_id", "ascending")])
    cols = {name: t.column(name).to_pylist() for name in
            ("problem_id", "question", "domain", "candidate_id", "text", "correct", "status")}
    rows: list[dict] = []
    too_long = candidates_too_long = 0
    lo, n = 0, t.num_rows
    while lo < n:
        pid = cols["problem_id"][lo]
        hi = lo
        while hi < n and cols["problem_id"][hi] == pid:
            hi += 1
        bad = UNRELIABLE.get(cols["domain"][lo], set())
        correct, wrong = [], []
        for i in range(lo, hi):
            text = cols["text"][i]
            if cols["status"][i] in bad or not text or not text.strip():
                continue
            if cfg.max_candidate_tokens is not None and count(text) > cfg.max_candidate_tokens:
                candidates_too_long += 1
                continue
            (correct if cols["correct"][i] else wrong).append((cols["candidate_id"][i], text))
        got, dropped = problem_prompts(pid, cols["question"][lo], correct, wrong, cfg, template, count, seed)
        rows.extend(got)
        too_long += dropped
        lo = hi
    for r in rows:
        r["token_counter"] = counter_name
    notes = {"dropped_too_long": str(too_long), "candidates_too_long": str(candidates_too_long)}
    return pa.Table.from_pylist(rows, schema=GENSELECT.with_metadata(notes))


def _kept(i: Inputs) -> pa.Table:
    """The keys of the kept problems' candidates: the shard plan. Each shard reads its own texts."""
    return i.sql("SELECT c.problem_id, c.candidate_id FROM candidates c JOIN problem_stats s "
                 "ON s.problem_id = c.problem_id AND s.teacher = '*' AND s.keep")


def _shard(keys: pa.Table, inputs: Inputs, cfg: GenSelectConfig, seed: int) -> pa.Table:
    """GenSelect rows of the kept problems in one shard (a problem_id range of ``keys``)."""
    lo, hi = pc.min(keys.column("problem_id")).as_py(), pc.max(keys.column("problem_id")).as_py()
    pool = inputs.sql(
        """
        SELECT c.problem_id, p.question, p.domain, c.candidate_id, c.text, v.correct, v.status
        FROM candidates c JOIN verdicts v USING (candidate_id) JOIN problems p ON p.problem_id = c.problem_id
        JOIN problem_stats s ON s.problem_id = c.problem_id AND s.teacher = '*' AND s.keep
        WHERE c.problem_id BETWEEN $lo AND $hi AND v.problem_id BETWEEN $lo AND $hi
        ORDER BY c.problem_id, c.candidate_id
        """,
        params={"lo": lo, "hi": hi},
    )
    return assemble(pool, cfg, seed)


def _dropped_too_long(w: Written) -> dict:
    """Prompts over ``genselect.max_tokens`` and candidates over ``genselect.max_candidate_tokens``, summed
    from the shards' metadata."""
    notes = list(w.shard_metadata())
    return {"prompts_dropped_too_long": sum(int(m.get(b"dropped_too_long", 0)) for m in notes),
            "candidates_dropped_too_long": sum(int(m.get(b"candidates_too_long", 0)) for m in notes)}


STAGE = Stage("genselect", VERSION, compute=_shard, table=_kept, context=lambda i: {"inputs": i}, shard_rows=50_000,
              summary=_dropped_too_long)


def node(recipe: Recipe, problems: Ref, candidates: list[Ref], verdicts: list[Ref], stats: Ref) -> Node:
    return STAGE.bind(key_config(recipe.genselect, recipe.seed),
                      {"problems": problems, "problem_stats": stats, "candidates": candidates, "verdicts": verdicts},
                      params={"cfg": recipe.genselect, "seed": recipe.seed})
