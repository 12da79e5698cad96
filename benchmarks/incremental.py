"""Row-level reuse, measured side by side in one run:

* ``grow``: a build from scratch of GSM8K problems sampled from the OpenAI-compatible test server with a
  realistic 50 ms per request, then the same recipe with 10 % more problems in the same store: the sampling
  stage's wall time of the +10 % build against the first (target <= 0.15x), with the requests each sent;
* ``overhead``: the GSM8K pool recipe (the build of dag_overhead.py) from scratch, with row reuse and with
  it switched off (the stages' ``rows`` declarations removed), and the time the reuse code itself spent
  in the driver (identities, look-up, row index) as a share of the build (target <= 3 %);
* ``lookup``: the look-up for 100,000 problems x 16 candidates (1.6 M rows) that an earlier output holds:
  identities, index read and join, rows fetched (target <= 2 s), for the verdicts and for the samples; and
  the verdicts' identities side by side with the layout before (a SHA-256 over every part by DuckDB).

    python benchmarks/incremental.py [grow|overhead|lookup[:PROBLEMS] ...]     (default: all three)

The load average is printed with the figures (this machine is shared).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))  # the test server

from _common import DATA, GSM8K_RECIPE  # noqa: E402

os.environ.setdefault("BONFORGE_DATA", str(DATA))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("RAY_raylet_start_wait_time_s", "180")  # Ray's start on a busy shared machine

PROBLEMS, GROWN, N, LATENCY_S = 400, 440, 8, 0.05

RECIPE = """
name: incremental
problems:
  name: gsm8k
  source: {path: gsm8k/example_model_solutions.jsonl}
  fields: {question: question, answer: ground_truth}
teachers:
  - {name: served, engine: openai, model: m, base_url: "URL", api_key_env: null, n: N, max_tokens: 256,
     max_concurrency: 32}
verify: {math: {patterns: ['(?m)^A:\\s*(.+?)\\s*$', '####\\s*(.+?)\\s*$']}}
export: {name: incremental}
"""


def load() -> str:
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def _sampling(record: dict, store) -> dict:
    key = record["stages"]["candidates"][0]
    man = store.manifest("candidates", key)
    return {"wall_s": man["timings"]["wall_s"], **record["rows"]["candidates[served]"]}


def grow() -> None:
    from llm_server import ScriptedServer

    from bonforge.config import load_recipe
    from bonforge.flows.build import build
    from bonforge.storage.store import StageStore

    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(delay_s=LATENCY_S) as server:
        path = Path(tmp, "recipe.yaml")
        path.write_text(RECIPE.replace("URL", server.url).replace("n: N", f"n: {N}"))
        store = StageStore(Path(tmp, "store"))
        figures = []
        for limit in (PROBLEMS, GROWN):
            before = server.count
            t0 = time.perf_counter()
            record = build(load_recipe(path, [f"problems.limit={limit}"]), str(store.root), tmp)
            figures.append((limit, server.count - before, time.perf_counter() - t0, _sampling(record, store)))
    print(f"grow: {N} samples per problem, {LATENCY_S * 1000:.0f} ms per request, 32 in flight ({load()})")
    print(f"  {'build':<22} {'requests':>8} {'sampling s':>10} {'computed':>9} {'reused':>7} {'build s':>8}")
    for (limit, requests, wall, s), name in zip(figures, ("from scratch", "+10 % problems")):
        print(f"  {name + f' ({limit})':<22} {requests:>8} {s['wall_s']:>10.2f} {s['computed']:>9} {s['reused']:>7} "
              f"{wall:>8.1f}")
    ratio = figures[1][3]["wall_s"] / figures[0][3]["wall_s"]
    print(f"  sampling stage, +10 % / from scratch: {ratio:.3f}x (target <= 0.15x)")


def sha256_verdict_ids(settings_hex: str, problems, candidates):
    """The verdict identities before the buffer read (``bonforge.identity`` until then, for the ratio): a SHA-256 by
    DuckDB over the problem's digest and the candidate's length-prefixed text."""
    import duckdb
    import pyarrow as pa
    import pyarrow.compute as pc

    from bonforge import identity

    parts = zip(*(problems.column(c).to_pylist() for c in ("domain", "gold")))
    prefix = pa.array([identity.hashlib.sha256(b"".join([settings_hex.encode(), *map(identity._field, v)])).hexdigest()
                       for v in parts])
    pos = pc.index_in(candidates.column("problem_id"), value_set=problems.column("problem_id"))
    con = duckdb.connect()
    con.register("r", pa.table({"h": prefix.take(pos), "text": candidates.column("text")}))
    text = "(CASE WHEN text IS NULL THEN '~' ELSE strlen(text)::VARCHAR || ':' || text END)"
    return con.sql(f"SELECT unhex(left(sha256(h || {text}), 32)) AS id FROM r").to_arrow_table().column("id")


class Timed:
    """Wraps the reuse functions the driver calls and adds up their time."""

    def __init__(self):
        self.seconds = 0.0

    def wrap(self, module, name: str) -> None:
        fn = self.fn = getattr(module, name)

        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.seconds += time.perf_counter() - t0

        setattr(module, name, timed)


def overhead() -> None:
    from bonforge.config import load_recipe
    from bonforge.engine import reuse
    from bonforge.flows.build import build
    from bonforge.stages import sample, verify

    recipe = load_recipe(GSM8K_RECIPE)
    declared = {"MATH": verify.MATH, "CODE": verify.CODE, "STAGE": sample.STAGE}
    walls = {}
    timer = Timed()
    for name in ("plan", "write_index"):
        timer.wrap(reuse, name)
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("without reuse", "with reuse", "without reuse ", "with reuse "):
            for attr, stage in declared.items():
                target = sample if attr == "STAGE" else verify
                setattr(target, attr, stage if mode.startswith("with ") else replace(stage, rows=None))
            timer.seconds = 0.0
            t0 = time.perf_counter()
            build(recipe, str(Path(tmp, mode.strip().replace(" ", "-") + str(len(walls)))), str(GSM8K_RECIPE.parent))
            walls[mode] = (time.perf_counter() - t0, timer.seconds)
    for attr, stage in declared.items():
        setattr(sample if attr == "STAGE" else verify, attr, stage)
    print(f"overhead: gsm8k-genselect from scratch (1,319 problems x 4 teachers; {load()})")
    for mode, (wall, spent) in walls.items():
        print(f"  {mode.strip():<14} build {wall:6.1f} s   reuse code in the driver {spent:5.2f} s "
              f"({spent / wall:.1%})")
    with_ = [w for m, (w, _) in walls.items() if m.startswith("with ")]
    without = [w for m, (w, _) in walls.items() if m.startswith("without")]
    print(f"  best of two: {min(with_):.1f} s with, {min(without):.1f} s without: {min(with_) / min(without) - 1:+.1%} "
          f"(target <= +3 %)")


def lookup(n_problems: int = 100_000) -> None:
    import numpy as np
    import pyarrow as pa

    from bonforge import identity
    from bonforge.config import Recipe
    from bonforge.engine import reuse
    from bonforge.engine.shards import StoreInputs, plan_shards
    from bonforge.llm.config import OpenAITeacher
    from bonforge.schema import CANDIDATES, PROBLEMS as PROBLEMS_SCHEMA, VERDICTS, conform
    from bonforge.stage import Ref
    from bonforge.stages import sample, verify
    from bonforge.storage.store import StageStore

    per = 16
    rng = np.random.default_rng(0)
    words = np.array("add the apples so we get total = 7 12 and then".split())
    pids = np.array([f"syn/{i:06d}" for i in range(n_problems)], dtype=object)
    problems = conform(pa.table({
        "problem_id": pids, "domain": ["math"] * n_problems, "answer": ["7"] * n_problems,
        "question": [f"Question {p}: " + " ".join(rng.choice(words, 30)) for p in pids]}), PROBLEMS_SCHEMA)
    rows = n_problems * per
    pid = np.repeat(pids, per)
    idx = np.tile(np.arange(per, dtype=np.int32), n_problems)
    filler = [" ".join(rng.choice(words, 80)) for _ in range(256)]
    cids = [f"{p}/t/{i}" for p, i in zip(pid, idx)]
    cands = conform(pa.table({"candidate_id": cids, "problem_id": pid, "teacher": ["t"] * rows, "sample_index": idx,
                              "text": [f"{c}: " + filler[j % 256] for j, c in enumerate(cids)]}), CANDIDATES)
    verdicts = conform(pa.table({"candidate_id": cids, "problem_id": pid, "teacher": ["t"] * rows,
                                 "correct": np.zeros(rows, bool), "reward": np.zeros(rows),
                                 "status": ["wrong_answer"] * rows}), VERDICTS)
    recipe = Recipe.model_validate({"name": "r", "problems": {"name": "syn", "source": {"path": "x"}},
                                    "teachers": [{"name": "t", "engine": "pool", "source": {"path": "x"}}],
                                    "export": {"name": "d"}})
    teacher = OpenAITeacher(engine="openai", name="t", model="m", n=per, shard_problems=64)
    print(f"lookup: {n_problems:,} problems x {per} = {rows:,} rows held by an earlier output ({load()})")
    gold = pa.table({"problem_id": problems.column("problem_id"), "domain": problems.column("domain"),
                     "gold": problems.column("answer")})
    times = {}
    for name, ids in (("SHA-256 by DuckDB (before)", sha256_verdict_ids),
                      ("SHA-256 of the texts alone, by DuckDB", identity.verdict_ids)):
        t0 = time.perf_counter()
        ids("s", gold, cands)
        times[name] = time.perf_counter() - t0
        print(f"  verdict identities, {name:<26} {times[name]:5.2f} s")
    before, after = times.values()
    print(f"  verdict identities, after / before: {after / before:.2f}x")
    with tempfile.TemporaryDirectory() as tmp:
        store = StageStore(tmp)
        for key in ("old", "new"):
            for stage, table, extra in (("problems", problems, None), ("candidates", cands, {"teacher": "t"})):
                store.write_shard(stage, key, 0, table)
                store.commit(stage, key, 1, version="1", config={}, upstream={}, extra=extra)
        cases = [("verdicts", lambda k: verify.node(recipe, Ref("problems", k), Ref("candidates", k), {"math"}),
                  verdicts, lambda i: i.read("candidates"), lambda i: {"problems": i.read("problems")}),
                 ("samples", lambda k: sample.node(Ref("problems", k), teacher), cands,
                  lambda i: i.read("problems", ["problem_id", "domain", "question"]), lambda i: {})]
        for name, make, output, table_of, context_of in cases:
            old, new = make("old"), make("new")
            inputs = StoreInputs(store, new.inputs, new.params)
            table, context = table_of(inputs), context_of(inputs)
            shards = plan_shards(table, new.stage.shard_rows)
            t0 = time.perf_counter()
            parts = reuse.plan(store, old, shards, context, [], look_up=False)  # the earlier build's ids
            ids_s = time.perf_counter() - t0
            store.write_shard(old.stage.name, old.key, 0, output)
            store.commit(old.stage.name, old.key, 1, version="1", config={}, upstream={})
            man = store.manifest(old.stage.name, old.key).json()
            man["row_index"] = reuse.write_index(store, old, parts, output.select(["candidate_id",
                                                                                   *old.stage.rows.volatile]))
            store.loc.write_bytes(store.loc.path("stages", old.stage.name, old.key, "manifest.json"),
                                  json.dumps(man).encode())
            located, fetched = Timed(), Timed()
            located.wrap(reuse, "locate")
            fetched.wrap(reuse, "fetch")
            t0 = time.perf_counter()
            parts = reuse.plan(store, new, shards, context, list(range(len(shards))), look_up=True)
            total = time.perf_counter() - t0
            reuse.locate, reuse.fetch = located.fn, fetched.fn
            found = sum(p.reused.num_rows for p in parts)
            look_up = ids_s + located.seconds
            print(f"  {name:<9} {len(shards):>5} shards: identities {ids_s:5.2f} s + index look-up "
                  f"{located.seconds:5.2f} s = {look_up:5.2f} s (target <= 2 s); rows read and placed "
                  f"{total - look_up:5.2f} s; {found:,} found")


if __name__ == "__main__":
    for what in sys.argv[1:] or ["grow", "overhead", "lookup"]:
        name, _, size = what.partition(":")  # lookup:12500 for a smaller pool
        {"grow": grow, "overhead": overhead, "lookup": lookup}[name](*map(int, filter(None, [size])))
