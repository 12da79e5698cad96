"""The sampling stage: problems → candidates of one teacher, in shards of whole problems.

Reads ``problems`` (PROBLEMS), writes ``candidates`` (CANDIDATES, key ``candidate_id``). Each shard is written
as soon as it is generated, so an interrupted run loses at most the shard in flight and a rerun generates
only the missing shards. The stage key covers the teacher's sampling settings, the model identity (name +
revision, or a hash of a local model directory) and the prompt template text.

Row reuse (``ROWS``, ``bonforge.engine.reuse``): a sample whose identity (``sample_settings``, the rendered
prompt, its index and seed) a committed candidates output holds is taken from there; the engine is asked only
for the missing sample indices of each problem, as runs of consecutive indices (seeds ``seed + index``).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bonforge import identity
from bonforge import templates
from bonforge.errors import DataError, TransientError
from bonforge.llm.base import Engine, EngineError, Request, Unfinished, consecutive, problem_seed, problem_seeds
from bonforge.llm.config import SampledTeacher
from bonforge.llm.fenced import sample_fenced
from bonforge.llm.tools import sample_with_tools
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.tool_calls import PythonCalls
from bonforge.llm.models import model_identity, model_resource
from bonforge.llm.prices import completion_cost
from bonforge.llm.window import Window
from bonforge.schema import CANDIDATES, conform, text_chars
from bonforge.tables.cost import cost_summary
from bonforge.stage import Inputs, Node, Params, Ref, Rows, Shortfall, Stage, Written, unkeyed

log = logging.getLogger("bonforge")

VERSION = "2"  # 2: the text_digest column
SAMPLE_VERSION = "1"  # what shapes a sample's content (its identity), apart from the stage's output


def read_template(teacher: SampledTeacher, domain: str) -> str:
    """The teacher's prompt template, or bonforge's default for the domain (for maths with fenced Python
    blocks, one that says how they run)."""
    tool = teacher.python_tool
    fenced = "_fenced" if domain == "math" and tool is not None and tool.style == "fenced" else ""
    return templates.load(teacher.prompt_template, f"sample_{domain}{fenced}.txt", ("{question}",),
                          f"teachers.{teacher.name}.prompt_template")  # fmt: skip


# The sandbox settings (``verify.code``) that shape what a tool call prints: a teacher's tool calls run there.
TOOL_SANDBOX = ("image", "wall_factor", "memory_mb", "output_limit_bytes", "tmpfs_mb", "pids_limit",
                "cpus_per_container")


def key_config(teacher: SampledTeacher, sandbox: CodeVerifyConfig | None = None) -> dict:
    """What identifies a teacher's samples: its settings minus execution-only ones, the model identity
    and the sha256 of every prompt template it may use; with a Python tool, the ``sandbox`` settings its calls
    run under (``TOOL_SANDBOX``)."""
    cfg = teacher.key_config()
    if getattr(teacher, "python_tool", None) is not None:
        keyed = (sandbox or CodeVerifyConfig()).key_config()
        cfg["tool_sandbox"] = {k: keyed[k] for k in TOOL_SANDBOX}
    cfg["model"] = model_identity(teacher.model, teacher.revision)
    domains = ["any"] if teacher.prompt_template else ["math", "code"]
    cfg["prompt_template"] = {
        d: hashlib.sha256(read_template(teacher, "math" if d == "any" else d).encode()).hexdigest()
        for d in domains
    }
    return cfg


def sample_settings(teacher: SampledTeacher, sandbox: CodeVerifyConfig | None = None) -> dict:
    """What shapes each sample besides its prompt, index and seed (``bonforge.identity``): the stage key's
    teacher settings without the teacher's name, ``n`` and the template (the rendered prompt covers it)."""
    cfg = {k: v for k, v in key_config(teacher, sandbox).items() if k not in ("name", "n", "prompt_template")}
    return {"version": SAMPLE_VERSION, **cfg}


def prompts(shard: pa.Table, teacher: SampledTeacher, cache: dict[str, str]) -> list[tuple[str, str]]:
    """``(problem_id, rendered prompt)`` of each problem of ``shard``; ``cache``: templates by domain."""
    rendered = rendered_prompts(shard, teacher, cache)
    return list(zip(shard.column("problem_id").to_pylist(), rendered.to_pylist()))


def messages(prompt: str) -> tuple[dict, ...]:
    """A rendered prompt as a sampling request's messages (what early stopping's drawing sends too)."""
    return ({"role": "user", "content": prompt},)


def rendered_prompts(shard: pa.Table, teacher: SampledTeacher, cache: dict[str, str]) -> pa.Array:
    """The rendered prompt of each problem of ``shard`` (``problem_id``, ``domain``, ``question``), built
    by Arrow (``templates.render_column``)."""
    questions = shard.column("question")
    blank = [not (isinstance(q, str) and q.strip()) for q in questions.to_pylist()]
    if any(blank):
        raise DataError("empty question", "problems", shard.column("problem_id")[blank.index(True)].as_py(),
                        "question")
    domain_col = shard.column("domain")
    domains = pc.fill_null(pc.if_else(pc.equal(domain_col, ""), pa.scalar(None, pa.string()), domain_col), "math")
    out = pa.nulls(shard.num_rows, pa.string())
    for domain in pc.unique(domains).to_pylist():
        if domain not in ("math", "code", "open"):
            bad = pc.index(domains, domain).as_py()
            raise DataError(f"unknown domain {domain!r} (expected 'math', 'code' or 'open')", "problems",
                            shard.column("problem_id")[bad].as_py(), "domain")
        if domain == "open" and not teacher.prompt_template:
            cache[domain] = "{question}"  # an open-ended request is the prompt as it is (no template to key)
        if domain not in cache:
            cache[domain] = read_template(teacher, domain)
        out = pc.if_else(pc.equal(domains, domain), templates.render_column(cache[domain], questions), out)
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def _ids(shard: pa.Table, _context: dict, params: SampleParams) -> pa.Table:
    """The candidates a problems shard gets (``bonforge.stage.Rows``): every sample index of every problem."""
    t = params.teacher
    rendered = rendered_prompts(shard, t, {})
    pids = shard.column("problem_id").combine_chunks()
    counts = _counts(shard, t)
    prompt_of = np.repeat(np.arange(len(pids)), counts)
    index = (np.arange(len(prompt_of)) - np.repeat(np.cumsum(counts) - counts, counts)).astype(np.int32)
    seed = problem_seeds(t.seed, pids)[prompt_of] + index
    settings = identity.settings("sample", sample_settings(t, params.sandbox))
    ids = identity.sample_ids(settings, rendered, prompt_of, index, seed)
    problem = pids.take(prompt_of)
    cids = pc.binary_join_element_wise(problem, pa.scalar(t.name), pa.array(index).cast(pa.string()), "/")
    return pa.table({"candidate_id": cids, "row_id": ids, "problem_id": problem, "sample_index": index, "seed": seed,
                     "teacher": pa.repeat(pa.scalar(t.name, pa.string()), len(index))})


def _counts(shard: pa.Table, teacher: SampledTeacher) -> np.ndarray:
    """The samples each problem of ``shard`` gets: its ``draws`` (a round of early stopping,
    ``bonforge.stages.rounds``), else the teacher's ``n``."""
    if "draws" in shard.column_names:
        return shard.column("draws").to_numpy(zero_copy_only=False).astype(np.int64)
    return np.full(shard.num_rows, teacher.n, np.int64)


def candidates(teacher: SampledTeacher, drawn: list[tuple[str, int, list]]) -> pa.Table:
    """The candidates rows of ``teacher``'s completions: ``(problem_id, index of the first sample, its
    completions)`` each, with what each cost at the teacher's prices."""
    name, prices, gpus = teacher.name, teacher.prices, teacher.gpus
    rows: dict[str, list[Any]] = {f.name: [] for f in CANDIDATES if f.name not in ("text_digest", "language")}
    for problem_id, start, comps in drawn:
        for c in comps:
            rows["candidate_id"].append(f"{problem_id}/{name}/{start + c.index}")
            rows["problem_id"].append(problem_id)
            rows["teacher"].append(name)
            rows["sample_index"].append(start + c.index)
            rows["text"].append(c.text)
            rows["reasoning"].append(c.reasoning)
            rows["finish_reason"].append(c.finish_reason)
            rows["prompt_tokens"].append(c.prompt_tokens)
            rows["completion_tokens"].append(c.completion_tokens)
            rows["seed"].append(c.seed)
            rows["reference_correct"].append(None)
            rows["cost_usd"].append(completion_cost(prices, c, gpus))
            rows["engine_s"].append(c.engine_s)
            rows["messages"].append(c.messages)
    return identity.with_digests(conform(pa.table(rows), CANDIDATES))


class Sampler:
    """The stage's compute function: a problems shard → its candidates. Creates the engine on first use
    and keeps it for later shards; counts the tokens and generation time of this process."""

    def __init__(self, teacher: SampledTeacher, engine: Engine | None = None, sandbox: CodeVerifyConfig | None = None):
        self.teacher = teacher
        self.engine = engine
        self.sandbox = sandbox or CodeVerifyConfig()  # where a teacher's tool calls run
        self.templates: dict[str, str] = {}
        self.stats = {"prompt_tokens": 0, "completion_tokens": 0, "generate_s": 0.0, "skipped_requests": 0,
                      "spent_usd": 0.0, "unpriced": 0}
        self.skipped: set[str] = set()  # problems whose prompt the engine skipped (they have no rows at all)

    def requests(self, shard: pa.Table, todo: pa.Table | None = None) -> list[tuple[Request, int]]:
        """The requests of ``shard``, each with the sample index of its first sample: one per problem, or,
        with ``todo`` (the samples still to draw), one per run of consecutive missing indices."""
        t = self.teacher
        missing: dict[str, list[int]] = {}
        if todo is not None:
            for pid, index in zip(todo.column("problem_id").to_pylist(), todo.column("sample_index").to_pylist()):
                missing.setdefault(pid, []).append(index)
        out = []
        for (pid, prompt), count in zip(prompts(shard, t, self.templates), _counts(shard, t).tolist()):
            runs = ([(0, count)] if count else []) if todo is None else consecutive(sorted(missing.get(pid, ())))
            for start, n in runs:
                out.append((Request(
                    id=pid, messages=messages(prompt), n=n, temperature=t.temperature,
                    top_p=t.top_p, max_tokens=t.max_tokens, seed=problem_seed(t.seed, pid) + start, stop=tuple(t.stop),
                ), start))  # fmt: skip
        return out

    def __call__(self, shard: pa.Table, todo: pa.Table | None = None, progress=None) -> pa.Table:
        """``progress(done, of)``: the samples drawn of those asked (``bonforge.stage.Stage.reports``)."""
        if self.engine is None:
            from bonforge.llm import make_engine

            self.engine = make_engine(self.teacher)
        self.engine.start()  # model loading stays out of the measured generation time
        planned = self.requests(shard, todo)
        requests = [r for r, _ in planned]
        t0 = time.perf_counter()
        samples = sum(r.n for r in requests)
        report = None if progress is None else lambda k: progress(k, samples)
        tool = getattr(self.teacher, "python_tool", None)
        short: Unfinished | None = None
        try:
            if tool is None:
                results = self.engine.generate(requests, report)
            else:
                calls = PythonCalls(self.sandbox, tool.time_limit_s)
                loop = sample_fenced if tool.style == "fenced" else sample_with_tools
                results = loop(self.engine, requests, calls, tool, report)
        except Unfinished as e:  # each failed sample fails alone: the rows received are kept
            results, short = e.results, e
        secs = time.perf_counter() - t0
        if len(results) != len(requests):
            raise EngineError(f"teacher {self.teacher.name}: engine returned {len(results)} results for "
                              f"{len(requests)} requests")
        for (req, _), comps in zip(planned, results):
            if not comps:
                self.stats["skipped_requests"] += 1
                self.skipped.add(req.id)
        out = candidates(self.teacher, [(req.id, start, comps) for (req, start), comps in zip(planned, results)])
        prompt, completion = (int(pc.sum(out.column(f"{k}_tokens")).as_py() or 0) for k in ("prompt", "completion"))
        costs = out.column("cost_usd")
        self.stats["prompt_tokens"] += prompt
        self.stats["completion_tokens"] += completion
        self.stats["spent_usd"] += float(pc.sum(costs).as_py() or 0.0)
        self.stats["unpriced"] += costs.null_count
        self.stats["generate_s"] += secs
        log.info("sample %s: %d problems, %d samples, %d completion tokens in %.1fs (%.0f tokens/s)",
                 self.teacher.name, len(requests), out.num_rows, completion, secs, completion / secs if secs else 0.0)
        if short is not None:
            log.warning("sample %s: %s", self.teacher.name, short)
            raise Shortfall(out, len(short.failed), short.why, isinstance(short, TransientError))
        return out

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None


def _summary(w: Written) -> dict:
    """Token totals over every shard on disk (also those of an earlier, interrupted run), this run's
    throughput, and the problems that got fewer than n samples (skipped prompts)."""
    teacher = w.node.params.teacher
    sampler = w.compute if w.compute is not None else Sampler(teacher)  # None: every row was reused
    s = sampler.stats
    table = w.read(["problem_id", "prompt_tokens", "completion_tokens"])
    per_problem = table.group_by("problem_id").aggregate([("problem_id", "count")]).to_pylist()
    rounds = "round" in w.node.inputs or "held" in w.node.inputs  # early stopping: fewer than n by design
    short = sorted({r["problem_id"] for r in per_problem if r["problem_id_count"] < teacher.n and not rounds}
                   | sampler.skipped)
    window = getattr(sampler.engine, "window", None)  # an adaptive one (``bonforge.llm.window``): its history
    return {
        "teacher": teacher.name,
        "engine": teacher.engine,
        "tokens": {k: int(pc.sum(table.column(f"{k}_tokens")).as_py() or 0) for k in ("prompt", "completion")},
        "text_chars": text_chars(w.each(["text"])),
        "throughput": {
            "completion_tokens": s["completion_tokens"],
            "generate_s": round(s["generate_s"], 3),
            "completion_tokens_per_s": round(s["completion_tokens"] / s["generate_s"], 1) if s["generate_s"] else None,
        },
        "cost": cost_summary(w.each(["cost_usd", "engine_s"]), s["spent_usd"],
                             None if teacher.engine == "openai" else teacher.gpus),
        "skipped_requests": s["skipped_requests"],
        "problems_short_of_n": short[:100],
        "problems_short_of_n_count": len(short),
        **({"concurrency": window.summary()} if isinstance(window, Window) else {}),
    }


@dataclass(frozen=True)
class SampleParams(Params):
    teacher: SampledTeacher
    engine: Engine | None = unkeyed(None)  # an engine already started (tests, the warm builder)
    sandbox: CodeVerifyConfig | None = unkeyed(None)  # the recipe's verify.code: where tool calls run

    def key_config(self) -> dict:
        return key_config(self.teacher, self.sandbox)


ROWS = Rows("candidate_id", _ids, ("text", "reasoning", "finish_reason", "prompt_tokens", "completion_tokens",
                                   "reference_correct", "text_digest", "language", "cost_usd", "engine_s",
                                   "messages"), CANDIDATES,
            optional=("text_digest", "language", "cost_usd", "engine_s", "messages"))  # null: verification hashes
# the text; the fence names the language; no cost recorded (rows made before costs were); no trajectory (a reused
# trajectory keeps its tool outputs: they are never run again)
STAGE = Stage("candidates", VERSION, params=SampleParams, schema=CANDIDATES,
              open=lambda p: contextlib.closing(Sampler(p.teacher, p.engine, p.sandbox)),
              table=lambda i: _requests(i), summary=_summary, rows=ROWS, reports=True,
              resource=lambda p: model_resource(p.teacher))


def _requests(i: Inputs) -> pa.Table:
    """What each problem's teacher is asked (column ``question``, rendered by the teacher's template): the
    problem's question, or for the fusor a fusion pool's rendered ``prompt``. With early stopping
    (``bonforge.stages.rounds``), the problems of a ``round`` table that this teacher draws from in the round,
    or (``held``) every problem it holds samples of after the last round, with their ``draws``."""
    for name, grows in (("round", "r.draws > r.drawn"), ("held", "r.draws > 0")):
        if name in i:
            return i.sql(f"SELECT p.problem_id, p.domain, p.question, r.draws FROM problems p JOIN {name} r "
                         f"ON r.problem_id = p.problem_id WHERE r.teacher = $t AND {grows} ORDER BY p.problem_id",
                         {"t": i.params.teacher.name})
    if "fusion_pools" in i:
        pools = i.read("fusion_pools", ["problem_id", "domain", "prompt"])
        return pools.rename_columns(["problem_id", "domain", "question"])
    return i.read("problems", ["problem_id", "domain", "question"])


def node(problems: Ref, teacher: SampledTeacher, engine: Engine | None = None,
         sandbox: CodeVerifyConfig | None = None) -> Node:
    """``teacher.n`` candidates per problem of ``problems``; the manifest's ``tokens`` / ``throughput`` give the
    token totals and this run's tokens/s; ``sandbox``: where a teacher's tool calls run (``verify.code``)."""
    return STAGE.bind(SampleParams(teacher, engine, sandbox), {"problems": problems},
                      label=f"candidates[{teacher.name}]", shard_rows=teacher.shard_problems,
                      note={"teacher": teacher.name})


def round_node(problems: Ref, plan: Ref, teacher: SampledTeacher, final: bool = False,
               engine: Engine | None = None, sandbox: CodeVerifyConfig | None = None) -> Node:
    """Early stopping: the samples of ``teacher`` that the round ``plan`` draws (``final``: all the samples it
    holds after the last round, every one already drawn), each problem's first ``draws`` (seeds and identities
    as in ``node``: those drawn before are reused); ``engine``: one lent to every round (not in the key);
    ``sandbox``: as in ``node``."""
    inputs = {"problems": problems, "held" if final else "round": plan}
    return STAGE.bind(SampleParams(teacher, engine, sandbox), inputs, label=f"candidates[{teacher.name}]",
                      shard_rows=teacher.shard_problems, note={"teacher": teacher.name})


def fusor_node(pools: Ref, teacher: SampledTeacher, engine: Engine | None = None,
               sandbox: CodeVerifyConfig | None = None) -> Node:
    """The fusor's one answer per fusion pool, asked the pool's rendered ``prompt`` as it is; ``sandbox``: as in
    ``node``."""
    return STAGE.bind(SampleParams(teacher, engine, sandbox), {"fusion_pools": pools},
                      label=f"candidates[{teacher.name}]",
                      shard_rows=teacher.shard_problems, note={"teacher": teacher.name})
