"""Exact early stopping (``filter.early_stop``): what it saves, against what it could save, and what it costs the
engine.

1. Real labelled pools (no model): per pool, the samples a build draws with and without early stopping, and the
   exact potential (drawing one sample at a time in the interleaved order, each problem stopped once decided).
   The rounds' saving is printed as a share of the potential (target >= 0.95).
2. A real model (vLLM, SmolLM2-135M on CPU by default): the same recipe built in four stores, one engine for all
   (loaded once), side by side: one batch (no early stopping), early stopping without rounds
   (``engine.streaming``: each problem asks for its next samples as soon as its verdicts are in), early stopping
   in rounds (each round a barrier), one batch again (A B C A: the first build also warms the engine up; the
   others are compared with the mean of the two one-batch builds). Prints the completions and completion tokens
   asked, the saving against the exact potential (from the full build's verdicts), and the completion tokens per
   second of the engine: tokens over the time it had requests (a ``generate`` call, or a stream's first request
   to its last answer). Targets: without rounds >= 0.97x of one batch at 64 problems x 8, >= 0.95x at 16
   (``--target-speed``). Model loading and a warm-up batch are left out. Also printed: the rule's ceiling, the
   one batch's samples with no more in flight than the rule ever asks for (``ceiling``): at few problems it is
   below one batch, and no exact early stopping can pass it.

    python benchmarks/early_stop.py                              # CPU, tiny: 8 problems x 8 samples x 32 tokens
    python benchmarks/early_stop.py --problems 64                # the issue's figure (and --problems 16)
    python benchmarks/early_stop.py --pools-only                 # part 1 alone (seconds)
    python benchmarks/early_stop.py --device gpu --model /models/Qwen3-0.6B --problems 512 --n 16 \\
        --max-tokens 1024 --max-pass-rate 0.5
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA  # noqa: E402

from bonforge.config import FilterConfig  # noqa: E402
from bonforge.stages import rounds  # noqa: E402


def one_at_a_time(patterns: list[list[bool]], cfg: FilterConfig) -> int:
    """Samples drawn one at a time in the interleaved order, stopped once too easy is certain."""
    order, seen, ok = rounds.interleaved(tuple(map(len, patterns))), [0] * len(patterns), 0
    total = sum(map(len, patterns))
    need = rounds.threshold(total, cfg)
    for k, t in enumerate(order):
        ok += patterns[t][seen[t]]
        seen[t] += 1
        if need is not None and ok >= need:
            return k + 1
    return total


def in_rounds(patterns: list[list[bool]], cfg: FilterConfig) -> tuple[int, int]:
    """Samples drawn by the rounds (``bonforge.stages.rounds.decide``), and the rounds taken."""
    caps = [len(p) for p in patterns]
    order, drawn, r = rounds.interleaved(tuple(caps)), [0] * len(caps), 1
    while True:
        correct = [sum(p[:d]) for p, d in zip(patterns, drawn)]
        draws, stopped = rounds.decide(drawn, correct, caps, order, cfg, r)
        if stopped or draws == drawn:
            return sum(drawn), r
        drawn, r = draws, r + 1


def pools() -> dict[str, list[list[list[bool]]]]:
    """Labelled pools of the data mirror: per problem, per teacher, its samples' labels."""
    out: dict[str, list] = {}
    gsm = DATA / "gsm8k" / "example_model_solutions.jsonl"
    if gsm.is_file():
        teachers = ["6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification"]
        rows = [json.loads(line) for line in gsm.read_text().splitlines() if line.strip()]
        out["GSM8K, 4 GPT-3 teachers x 1"] = [[[bool(r[t]["is_correct"])] for t in teachers] for r in rows]
    apps = sorted(p for p in (DATA / "apps-coderl").glob("*/gen_solutions.json"))
    if apps:
        out["APPS (CodeRL), 1 teacher"] = [[[s["result"] is True for s in json.loads(p.read_text())]] for p in apps]
    return out


def report_pools(cfg: FilterConfig) -> float:
    print(f"{'pool':34} {'problems':>8} {'samples':>8} {'rounds':>8} {'potential':>9} {'share':>6} {'max rounds':>10}")
    worst = 1.0
    for name, problems in pools().items():
        total = sum(sum(map(len, p)) for p in problems)
        best = sum(one_at_a_time(p, cfg) for p in problems)
        drawn = [in_rounds(p, cfg) for p in problems]
        used = sum(d for d, _ in drawn)
        share = (total - used) / (total - best) if total > best else 1.0
        worst = min(worst, share)
        most = max(r for _, r in drawn)
        print(f"{name:34} {len(problems):>8} {total:>8} {used:>8} {best:>9} {share:>6.3f} {most:>10}")
        print(f"  saving: {100 * (total - used) / total:.1f} % of the samples (exact potential "
              f"{100 * (total - best) / total:.1f} %)")
    return worst


def easy_sums(count: int) -> list[dict]:
    """Sums a small model often gets right, some harder: a mix of problems that stop early and that do not."""
    rng = random.Random(0)
    rows = []
    for i in range(count):
        a, b = (rng.randint(1, 9), rng.randint(1, 9)) if i % 2 == 0 else (rng.randint(100, 999), rng.randint(100, 999))
        rows.append({"id": f"s{i:05d}", "question": f"What is {a} + {b}? Answer with the number in \\boxed{{}}.",
                     "answer": str(a + b)})
    return rows


class Counting:
    """The engine every build uses (their stages' ``close`` keeps it loaded): counts completions and tokens, and
    the seconds it had requests (a ``generate`` call; a stream from its first request to its last answer)."""

    def __init__(self, engine):
        self.engine, self.name, self.completions, self.tokens, self.seconds = engine, engine.name, 0, 0, 0.0

    def start(self) -> None:
        self.engine.start()

    def _count(self, comps) -> None:
        self.completions += len(comps)
        self.tokens += sum(c.completion_tokens for c in comps)

    def generate(self, requests, progress=None):
        t0 = time.perf_counter()
        out = self.engine.generate(requests, progress)
        self.seconds += time.perf_counter() - t0
        for comps in out:
            self._count(comps)
        return out

    def stream(self, out):
        from bonforge.llm.stream import open_stream

        answers = Answers(self, out)
        return Timed(self, answers, open_stream(self.engine, answers))

    def close(self) -> None:
        pass


class Answers:
    """A stream's answers, counted on their way to the reader."""

    def __init__(self, counting: Counting, out):
        self.counting, self.out, self.last = counting, out, None

    def put(self, item) -> None:
        if not isinstance(item, BaseException):
            self.counting._count(item[1])
            self.last = time.perf_counter()
        self.out.put(item)


class Timed:
    """A stream whose time, from its first request to its last answer, is added to the engine's seconds."""

    def __init__(self, counting: Counting, answers: Answers, stream):
        self.counting, self.answers, self.stream, self.first = counting, answers, stream, None

    def put(self, requests) -> None:
        self.first = self.first or time.perf_counter()
        self.stream.put(requests)

    def close(self) -> None:
        self.stream.close()
        if self.first is not None and self.answers.last is not None:
            self.counting.seconds += self.answers.last - self.first


def real_model(args, cfg: FilterConfig, engine=None) -> float:
    """Part 2. ``engine``: a started engine lent by the caller, with the recipe's model and window (the real-model
    test of early stopping runs this script's smoke run so, on its own engine): neither started nor closed here."""
    import bonforge.llm
    from bonforge.config import load_recipe
    from bonforge.llm.vllm_engine import VLLMEngine
    from bonforge.runtime.cluster import ensure_ray

    folder = Path(tempfile.mkdtemp(prefix="bonforge-early-stop-"))
    (folder / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in easy_sums(args.problems)))
    cpu = ", device: cpu, dtype: float32" if args.device == "cpu" else ""
    (folder / "recipe.yaml").write_text(f"""
name: early-stop-bench
problems: {{name: sums, source: {{path: sums.jsonl}}, fields: {{id: id}}}}
teachers:
  - {{name: t, engine: vllm, model: "{args.model}"{cpu}, max_model_len: 2048, n: {args.n}, temperature: 0.7,
     top_p: 0.95, max_tokens: {args.max_tokens}, shard_problems: {args.problems}}}
filter: {{max_pass_rate: {cfg.max_pass_rate}}}
export: {{name: sums, allow_empty: true}}
""")
    own = engine is None
    if own:
        teacher = load_recipe(folder / "recipe.yaml").teachers[0]
        if args.device == "cpu":  # the replica computes on every core but reserves half of Ray's: verification beside
            cores = os.cpu_count() or 1
            ensure_ray(num_cpus=2 * cores)
            teacher = teacher.model_copy(update={"cpus_per_replica": cores})
        engine = VLLMEngine(teacher)
        t0 = time.perf_counter()
        engine.start()
        print(f"model loaded in {time.perf_counter() - t0:.1f}s (left out of the figures)")
    warm(engine, min(args.problems * args.n, 128), args.max_tokens)
    make, counting = bonforge.llm.make_engine, Counting(engine)
    bonforge.llm.make_engine = lambda teacher: counting
    try:
        figures = builds(folder, counting)
    finally:
        bonforge.llm.make_engine = make
        if own:
            engine.close()
    return compare(figures, cfg, args.target_speed)


def warm(engine, samples: int, max_tokens: int) -> None:
    """One batch of ``samples`` samples of other sums, not counted: an engine's first batches run slower (at 64 x 8
    the first one-batch build got 45 tokens/s, the same build after the others 93), which read as a gain of
    whatever was compared with the mean of the first and the last build."""
    from bonforge.llm.base import Request

    t0 = time.perf_counter()
    engine.generate([Request(id=r["id"], messages=({"role": "user", "content": r["question"]},), n=1, temperature=0.7,
                             max_tokens=max_tokens, seed=10**6 + i)
                     for i, r in enumerate(easy_sums(samples))])
    print(f"engine warmed up with {samples} samples in {time.perf_counter() - t0:.1f}s (left out of the figures)")


BUILDS = {  # label: the --set overrides of each build, in the order they run (A B C A)
    "one batch": ["filter.early_stop=false"],
    "no rounds": ["filter.early_stop=true", "engine.streaming=true"],
    "rounds": ["filter.early_stop=true", "engine.streaming=false"],
    "one batch again": ["filter.early_stop=false"],
}


def builds(folder: Path, engine: Counting) -> dict[str, dict]:
    """The recipe built as ``BUILDS`` says, each in a store of its own, every node in this process (without
    Prefect: the sampling is what is measured); what each asked of ``engine`` and the engine's seconds."""
    from bonforge.config import load_recipe
    from bonforge.engine.run import Run, execute
    from bonforge.engine.shards import run_node
    from bonforge.flows.build import dag
    from bonforge.storage.store import StageStore

    class LocalRun(Run):
        def __call__(self, node):
            t0 = time.perf_counter()
            return self._note(node, run_node(self.store, node), False, time.perf_counter() - t0)

    figures = {}
    for label, sets in BUILDS.items():
        if label == "one batch again":  # between the two one-batch builds, as they are: drift shows in their mean
            figures["ceiling"] = ceiling(load_recipe(folder / "recipe.yaml"), figures["one batch"], engine)
        store = StageStore(folder / label.replace(" ", "-"))
        before = (engine.completions, engine.tokens, engine.seconds)
        t0 = time.perf_counter()
        record = execute(dag, LocalRun(store, load_recipe(folder / "recipe.yaml", sets)), str(folder), None,
                         record_start=True).json()
        tokens, seconds = engine.tokens - before[1], engine.seconds - before[2]
        figures[label] = {"completions": engine.completions - before[0], "tokens": tokens,
                          "tokens_per_s": tokens / seconds if seconds else 0.0, "engine_s": seconds,
                          "build_s": time.perf_counter() - t0, "record": record, "store": store,
                          "rounds": len(record["stages"].get("rounds", []))}
    return figures


def ceiling(recipe, full: dict, engine: Counting) -> dict:
    """The most tokens/s any exact early stopping can get of ``engine``: the rule asks at most ``T`` samples of a
    problem at once (``T``: the fewest right that decide it, ``rounds.threshold``; it asks ``T - c`` more, or
    fewer when fewer are left; all the rest from round ``rounds.MAX_ROUNDS`` on, which 8 samples never reach), so
    no more than problems x ``T`` samples are ever in flight. The one batch's
    samples (``full``'s requests, their seeds) drawn through the engine's stream with at most that many in
    flight, each finished one replaced at once: the rule's concurrency without its verdicts and its order."""
    from bonforge.llm.base import Request, problem_seed
    from bonforge.stages import sample

    (teacher,) = recipe.teachers
    (key,) = full["record"]["stages"]["problems"]
    table = full["store"].read("problems", key, ["problem_id", "domain", "question"])
    cap = table.num_rows * (rounds.threshold(teacher.n, recipe.filter) or teacher.n)
    todo = [Request(id=pid, messages=sample.messages(prompt), n=1, temperature=teacher.temperature,
                    top_p=teacher.top_p, max_tokens=teacher.max_tokens, seed=problem_seed(teacher.seed, pid) + i,
                    stop=tuple(teacher.stop))
            for i in range(teacher.n) for pid, prompt in sample.prompts(table, teacher, {})]
    before, tokens, out = engine.completions, engine.tokens, queue.Queue()
    stream = engine.stream(out)
    sent = min(cap, len(todo))
    stream.put(todo[:sent])
    for _ in todo:
        item = out.get()
        if isinstance(item, BaseException):
            raise item
        if sent < len(todo):
            stream.put([todo[sent]])
            sent += 1
    t0 = engine.seconds
    stream.close()
    seconds = engine.seconds - t0
    done = engine.tokens - tokens
    return {"completions": engine.completions - before, "tokens": done, "engine_s": seconds,
            "tokens_per_s": done / seconds if seconds else 0.0, "build_s": seconds, "rounds": 0, "cap": cap}


def compare(figures: dict[str, dict], cfg: FilterConfig, target: float) -> float:
    """Prints the builds' table, the saving against the exact potential and the tokens/s ratios; the worst share
    (the speed ratio without rounds scaled so that ``target`` counts as 0.95; 0: contents differ)."""
    full, early = figures["one batch"], figures["no rounds"]
    (key,) = full["record"]["stages"]["verdicts"]
    verdicts = full["store"].read("verdicts", key, ["problem_id", "candidate_id", "correct"]).to_pylist()
    by_problem: dict[str, list] = {}
    for v in sorted(verdicts, key=lambda v: int(v["candidate_id"].rsplit("/", 1)[1])):
        by_problem.setdefault(v["problem_id"], []).append(bool(v["correct"]))
    best = sum(one_at_a_time([p], cfg) for p in by_problem.values())
    saved, potential = full["completions"] - early["completions"], full["completions"] - best
    share = saved / potential if potential else 1.0
    cap = figures.pop("ceiling")
    same = len({_content(f) for f in figures.values()}) == 1
    exact = figures["rounds"]["completions"] == early["completions"]
    print(f"{'':15} {'completions':>11} {'tokens':>8} {'engine s':>8} {'tokens/s':>9} {'rounds':>6} {'build s':>7}")
    for label, f in figures.items():
        print(f"{label:15} {f['completions']:>11} {f['tokens']:>8} {f['engine_s']:>8.1f} {f['tokens_per_s']:>9.1f} "
              f"{f['rounds']:>6} {f['build_s']:>7.1f}")
    print(f"saving: {saved} completions ({100 * saved / max(full['completions'], 1):.1f} %), "
          f"{full['tokens'] - early['tokens']} tokens; exact potential {potential}: share {share:.3f}; "
          f"same completions with and without rounds: {exact}; same dataset content: {same}")
    one_batch = (full["tokens_per_s"] + figures["one batch again"]["tokens_per_s"]) / 2
    ratios = {label: figures[label]["tokens_per_s"] / one_batch if one_batch else 0.0
              for label in ("no rounds", "rounds")}
    print(f"tokens/s / one batch (the mean of before and after): without rounds {ratios['no rounds']:.2f}x "
          f"(target {target:.2f}x), rounds {ratios['rounds']:.2f}x")
    print(f"the rule's ceiling (the one batch's samples, at most {cap['cap']} in flight): {cap['tokens_per_s']:.1f} "
          f"tokens/s = {cap['tokens_per_s'] / one_batch if one_batch else 0.0:.2f}x one batch; without rounds "
          f"{early['tokens_per_s'] / cap['tokens_per_s'] if cap['tokens_per_s'] else 0.0:.2f}x the ceiling, rounds "
          f"{figures['rounds']['tokens_per_s'] / cap['tokens_per_s'] if cap['tokens_per_s'] else 0.0:.2f}x")
    return min(share, ratios["no rounds"] / target * 0.95) if same and exact else 0.0


def _content(figure: dict) -> str:
    path = figure["store"].root / figure["record"]["dataset"] / "manifest.json"
    return json.loads(path.read_text())["content_sha256"]


def main(argv: list[str] | None = None, engine=None) -> int:
    """The exit status; ``engine``: see ``real_model``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--problems", type=int, default=8)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--max-pass-rate", type=float, default=0.25)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    p.add_argument("--pools-only", action="store_true")
    p.add_argument("--target", type=float, default=0.95, help="exit 1 when a share falls below (0: never)")
    p.add_argument("--target-speed", type=float, default=None,
                   help="tokens/s without rounds / one batch (default: 0.97 from 64 problems on, else 0.95)")
    args = p.parse_args(argv)
    args.target_speed = args.target_speed or (0.97 if args.problems >= 64 else 0.95)
    cfg = FilterConfig(max_pass_rate=args.max_pass_rate)
    print(f"real pools, max_pass_rate {cfg.max_pass_rate} (share: the rounds' saving / the exact potential)")
    worst = report_pools(cfg)
    if not args.pools_only:
        worst = min(worst, real_model(args, cfg, engine))
    return 1 if args.target and worst < args.target else 0


if __name__ == "__main__":
    if "--pools-only" not in sys.argv:
        import multiprocessing

        multiprocessing.freeze_support()
    sys.exit(main())
