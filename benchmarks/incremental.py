"""Row-level reuse, measured side by side in one run:

* ``grow``: a build from scratch of GSM8K problems sampled from the OpenAI-compatible test server with a
  realistic 50 ms per request, then the same recipe with 10 % more problems in the same store: the sampling
  stage's wall time of the +10 % build against the first (target <= 0.15x), with the requests each sent;
* ``overhead``: the GSM8K pool recipe (the build of dag_overhead.py) from scratch, with row reuse and with
  it switched off (the stages' ``rows`` declarations removed), and the time the reuse code itself spent
  in the driver (identities, look-up, row index) as a share of the build (target <= 3 %);
* ``lookup``: the look-up for 100,000 problems x 16 candidates (1.6 M rows) that an earlier output holds:
  identities, index read and join (target <= 2 s), then the rows fetched, for the verdicts (over candidates with
  their ``text_digest``, each text hashed where it was written, and without, as in a store written before the
  column) and for the samples; with ``--baseline DIR`` (another checkout, e.g. ``git archive main``) that code's
  look-up of the same rows first, in a process of its own, and the ratios.

    python benchmarks/incremental.py [grow[:PROBLEMS]|overhead[:PROBLEMS]|lookup[:PROBLEMS] ...] [--baseline DIR]

(default: all three, at 400 problems grown by 10 %, all 1,319 GSM8K problems, 100,000 problems; a smoke run:
``grow:10 overhead:8 lookup:8 --baseline .``).

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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))  # the test server

from _common import DATA, GSM8K_RECIPE  # noqa: E402

os.environ.setdefault("BONFORGE_DATA", str(DATA))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("RAY_raylet_start_wait_time_s", "180")  # Ray's start on a busy shared machine

PROBLEMS, N, LATENCY_S = 400, 8, 0.05

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
export: {name: incremental, allow_empty: true}  # its random answers pass no problem of a small build
"""


def load() -> str:
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def _sampling(record: dict, store) -> dict:
    key = record["stages"]["candidates"][0]
    man = store.manifest("candidates", key)
    return {"wall_s": man["timings"]["wall_s"], **record["rows"]["candidates[served]"]}


def grow(problems: int = PROBLEMS) -> None:
    from llm_server import ScriptedServer

    from bonforge.config import load_recipe
    from bonforge.flows.build import build
    from bonforge.storage.store import StageStore

    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(delay_s=LATENCY_S) as server:
        path = Path(tmp, "recipe.yaml")
        path.write_text(RECIPE.replace("URL", server.url).replace("n: N", f"n: {N}"))
        store = StageStore(Path(tmp, "store"))
        figures = []
        for limit in (problems, problems + max(1, problems // 10)):
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


def overhead(problems: int | None = None) -> None:
    from bonforge.config import load_recipe
    from bonforge.engine import reuse
    from bonforge.flows.build import build
    from bonforge.stages import sample, verify

    recipe = load_recipe(GSM8K_RECIPE, [f"problems.limit={problems}"] if problems else None)
    declared = {"MATH": verify.MATH, "CODE": verify.CODE, "STAGE": sample.STAGE}
    walls = {}
    timer = Timed()
    for name in ("plan", "merge", "commit_rows"):
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
    print(f"overhead: gsm8k-genselect from scratch ({problems or 1319:,} problems x 4 teachers; {load()})")
    for mode, (wall, spent) in walls.items():
        print(f"  {mode.strip():<14} build {wall:6.1f} s   reuse code in the driver {spent:5.2f} s "
              f"({spent / wall:.1%})")
    with_ = [w for m, (w, _) in walls.items() if m.startswith("with ")]
    without = [w for m, (w, _) in walls.items() if m.startswith("without")]
    print(f"  best of two: {min(with_):.1f} s with, {min(without):.1f} s without: {min(with_) / min(without) - 1:+.1%} "
          f"(target <= +3 %)")


def lookup(n_problems: int = 100_000, baseline: str | None = None) -> None:
    """This code's look-up, and with ``baseline`` (another checkout, e.g. of main) that code's on the same rows,
    run first in a process of its own."""
    before = json.loads(_child(baseline, n_problems)) if baseline else {}
    print(f"lookup: {n_problems:,} problems x 16 = {n_problems * 16:,} rows held by an earlier output ({load()})")
    figures = _figures(n_problems)
    print(f"  {'':<9} {'':<44} {'look-up':>8} {'of which: identities':>20} {'index':>6} {'rows fetched':>12}")
    before = {k.replace("this code", "baseline") if "this code" in k else f"baseline: {k}": v
              for k, v in before.items()}  # fmt: skip
    for name, rows in list(before.items()) + list(figures.items()):
        total, ids_s, index_s, fetch_s, found = rows
        what, _, how = name.rpartition(" ")
        print(f"  {how:<9} {what:<44} {total - fetch_s:>6.2f} s {ids_s:>18.2f} s {index_s:>4.2f} s {fetch_s:>10.2f} s"
              f"  ({found:,} found)")
    for what in ("verdicts", "samples"):
        after = figures[f"this code: {what}"]
        line = f"  {what}: look-up {after[0] - after[3]:.2f} s (target <= 2 s)"
        if b := before.get(f"baseline: {what}"):
            line += (f", this code / baseline {(after[0] - after[3]) / (b[0] - b[3]):.2f}x "
                     f"(identities {after[1] / b[1]:.2f}x, index {after[2] / b[2]:.2f}x)")
        print(line)


def _child(code: str, n_problems: int) -> str:
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(Path(code).resolve())}
    return subprocess.run([sys.executable, __file__, f"figures:{n_problems}"], env=env, check=True,
                          capture_output=True, text=True).stdout.strip().splitlines()[-1]


def _figures(n_problems: int) -> dict[str, tuple]:
    """(whole plan s, identities s, index look-up s, rows fetched s, rows found) of each case the code that runs
    knows: verdicts (over candidates with their ``text_digest``, and without, as written before it existed)
    and samples."""
    import numpy as np
    import pyarrow as pa

    from bonforge import identity
    from bonforge.config import Recipe
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
    cases = [("verdicts", cands)]
    if hasattr(identity, "with_digests"):  # the candidates' text_digest: each text hashed where it is written
        t0 = time.perf_counter()
        digested = identity.with_digests(cands)
        print(f"  hashing the texts once, where the candidates are written: {time.perf_counter() - t0:5.2f} s")
        cases = [("this code: verdicts", digested), ("this code, a store without text_digest: verdicts", cands),
                 ("this code: samples", digested)]
    else:
        cases += [("samples", cands)]
    figures = {}
    for name, candidates in cases:
        with tempfile.TemporaryDirectory() as tmp:
            store = StageStore(tmp)
            for key in ("old", "new"):
                for stage, table, extra in (("problems", problems, None), ("candidates", candidates, {"teacher": "t"})):
                    store.write_shard(stage, key, 0, table)
                    store.commit(stage, key, 1, version="1", config={}, upstream={}, extra=extra)
            if name.endswith("verdicts"):
                figures[name] = _look_up(store, lambda k: verify.node(recipe, Ref("problems", k),
                                                                       Ref("candidates", k), {"math"}),
                                         verdicts, lambda i: i.read("candidates"),
                                         lambda i: {"problems": i.read("problems")})
            else:
                figures[name] = _look_up(store, lambda k: sample.node(Ref("problems", k), teacher), candidates,
                                         lambda i: i.read("problems", ["problem_id", "domain", "question"]),
                                         lambda i: {})
    return figures


def _look_up(store, make, output, table_of, context_of) -> tuple[float, float, float, float, int]:
    """An earlier build's output of ``make("old")`` with its row index, then the look-up of ``make("new")``
    over the same rows: (whole plan s, identities s, index look-up s, rows fetched s, rows found)."""
    import pyarrow as pa

    from bonforge.engine import reuse
    from bonforge.engine.shards import StoreInputs, plan_shards

    old, new = make("old"), make("new")
    inputs = StoreInputs(store, new.inputs, new.params)
    table, context = table_of(inputs), context_of(inputs)
    shards = plan_shards(table, new.stage.shard_rows)
    parts = reuse.plan(store, old, shards, context, [], look_up=False)  # the earlier build's ids
    whole = reuse.Part(pa.concat_tables([p.ids for p in parts]))
    if hasattr(reuse, "commit_rows"):  # the shard's piece of the row index in its footer, as a build writes it
        store.write_shard(old.stage.name, old.key, 0, output, reuse.notes(whole, output, old.stage.rows))
    else:
        store.write_shard(old.stage.name, old.key, 0, output)
    store.commit(old.stage.name, old.key, 1, version="1", config={}, upstream={})
    man = store.manifest(old.stage.name, old.key).json()
    if hasattr(reuse, "commit_rows"):  # the index joined from the footers' pieces, as at a build's commit
        man["row_index"] = reuse.commit_rows(store, old, 1)["row_index"]
    elif hasattr(reuse, "write_piece"):  # the index written from each shard's piece
        reuse.write_piece(store, old.stage.name, old.key, 0, whole, output, old.stage.rows)
        man["row_index"] = reuse.write_index(store, old, 1)
    else:
        keys = output.select(["candidate_id", *old.stage.rows.volatile])
        man["row_index"] = reuse.write_index(store, old, parts, keys)
    store.loc.write_bytes(store.loc.path("stages", old.stage.name, old.key, "manifest.json"), json.dumps(man).encode())
    t0 = time.perf_counter()
    new.stage.rows.ids(table, context, new.params)
    ids_s = time.perf_counter() - t0
    located, fetched = Timed(), Timed()
    located.wrap(reuse, "locate")
    fetched.wrap(reuse, "fetch")
    try:
        t0 = time.perf_counter()
        parts = reuse.plan(store, new, shards, context, list(range(len(shards))), look_up=True)
        total = time.perf_counter() - t0
    finally:
        reuse.locate, reuse.fetch = located.fn, fetched.fn
    return total, ids_s, located.seconds, fetched.seconds, sum(p.reused.num_rows for p in parts)


if __name__ == "__main__":
    args = sys.argv[1:]
    base = None
    if "--baseline" in args:  # lookup --baseline DIR: that checkout's look-up first, side by side
        at = args.index("--baseline")
        base, args = args[at + 1], args[:at] + args[at + 2:]
    for what in args or ["grow", "overhead", "lookup"]:
        name, _, size = what.partition(":")  # lookup:12500 for a smaller pool
        if name == "figures":  # the child of lookup --baseline
            print(json.dumps(_figures(int(size))))
        elif name == "lookup":
            lookup(int(size or 100_000), base)
        else:
            {"grow": grow, "overhead": overhead}[name](*map(int, filter(None, [size])))
