"""A streaming build against the barrier build, side by side in one run: HumanEval, two sampled teachers x 8
served by a simulated GPU, verified in the real Docker sandbox.

The simulated GPU is an OpenAI-compatible HTTP server of this script's own (asyncio, in this process: it uses
next to no CPU): it answers each request after ``--latency`` seconds, starting at most ``--rate`` requests a
second (the rest wait their turn), with the CodeT samples of the shared data as its answers (teacher ``a``
the first 8 of each problem, ``b`` the next 8; the request's seed says which sample). Each build runs as a
child process (its own Prefect and Ray start, its own sandbox pool) into a fresh store, ``engine.streaming``
false then true.

Printed per build: the wall time (services' start included) and the stages' (from the first shard's start to
the last's end); each resource's busy time, the generator's (the union of the intervals
with a request waiting or answering, seen by the server) and the sandbox's (the union of the verification
shards' spans, from the verdicts' manifests); both times over the busier resource, the wall over their sum; the
generator's idle share between its first request and its last answer; when each stage computed (its first shard's
start to its last's end, from the build's start); whether both builds published the same dataset bytes.

    python benchmarks/streaming.py [--latency 0.5] [--rate 40] [--problems 164] [--shard-problems 8] [--shards]
                                   [--builds barrier streaming]

A smoke run (minutes on a loaded machine, no figure meant): ``--problems 4 --shard-problems 2``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from _common import DATA  # noqa: E402

HUMANEVAL = REPO / "recipes" / "humaneval-genselect.yaml"
TEACHERS = {"a": 0, "b": 8}  # teacher -> its first CodeT sample


class SimulatedGPU:
    """OpenAI's chat completions over HTTP/1.1 (keep-alive), answered from ``samples`` (model -> problem ->
    texts; the prompt names the problem, ``prompts``: prompt -> problem id; the seed less the problem's seed the
    sample) after ``latency`` seconds, at most ``rate`` requests started a second. ``spans``: each request's
    (arrival, answer, model) on the monotonic clock."""

    def __init__(self, seeds: dict, latency: float, rate: float):
        self.samples: dict = {}
        self.prompts: dict = {}
        self.seeds = seeds
        self.latency, self.gap = latency, 1.0 / rate
        self.next_start = 0.0
        self.spans: list[tuple[float, float]] = []
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        ready.wait()

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        ready.set()
        self.loop.run_forever()

    def _answer(self, body: dict) -> dict:
        from bonforge.llm.base import problem_seed

        model = body["model"]
        pid = self.prompts[body["messages"][-1]["content"]]
        text = self.samples[model][pid][body["seed"] - problem_seed(self.seeds[model], pid)]
        return {"id": "sim", "object": "chat.completion", "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": max(1, len(text) // 4),
                          "total_tokens": 100 + max(1, len(text) // 4)}}

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                if not line.strip():
                    continue
                length = 0
                while (header := await reader.readline()).strip():
                    name, _, value = header.decode().partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = json.loads(await reader.readexactly(length)) if length else {}
                arrival = time.monotonic()
                start = max(arrival, self.next_start)
                self.next_start = start + self.gap
                await asyncio.sleep(start + self.latency - arrival)
                raw = json.dumps(self._answer(body)).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: " + str(len(raw)).encode() + b"\r\n\r\n" + raw)
                await writer.drain()
                self.spans.append((arrival, time.monotonic(), body["model"]))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def union(spans: list[tuple[float, float]]) -> float:
    """The length of the union of ``spans``."""
    total, end = 0.0, float("-inf")
    for a, b, *_ in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def setup(args: argparse.Namespace, folder: Path, gpu: SimulatedGPU) -> Path:
    """The recipe of two sampled teachers served by ``gpu``, and what ``gpu`` answers from."""
    from bonforge.config import load_recipe
    from bonforge.sources.code import import_codet_pool
    from bonforge.sources.data import resolve
    from bonforge.stages.load import load_problems
    from bonforge.stages.sample import prompts

    (folder / "plain.txt").write_text("{question}")
    teachers = "".join(f"""
  - {{name: {name}, engine: openai, model: codegen16b-{name}, base_url: "{gpu.url}", api_key_env: null, n: 8,
     seed: {i},
     max_tokens: 300, prompt_template: plain.txt, shard_problems: {args.shard_problems}, max_concurrency: 32}}"""
                       for i, name in enumerate(TEACHERS))
    recipe = folder / "recipe.yaml"
    recipe.write_text(f"""name: humaneval-streaming
problems:
  name: humaneval
  domain: code
  format: humaneval
  source: {{path: {DATA / "humaneval" / "HumanEval.jsonl.gz"}}}
  limit: {args.problems}
teachers:{teachers}
verify: {{code: {{extraction: prompt_completion, time_limit_s: 3}}}}
filter: {{min_pass_rate: 0.0, max_pass_rate: 0.5}}
export: {{name: humaneval-streaming, allow_empty: true}}  # a smoke run's few problems may all drop
""")
    r = load_recipe(str(recipe))
    problems = load_problems(r.problems, resolve(r.problems.source))
    pool = import_codet_pool(DATA / "humaneval" / "codet_codegen16B_samples.jsonl", problems, n=16)
    texts: dict[str, list[str]] = {}
    for pid, text in zip(pool.column("problem_id").to_pylist(), pool.column("text").to_pylist()):
        texts.setdefault(pid, []).append(text)
    gpu.samples = {t.model: {pid: v[TEACHERS[t.name]:TEACHERS[t.name] + 8] for pid, v in texts.items()}
                   for t in r.teachers}
    gpu.prompts = {prompt: pid for t in r.teachers for pid, prompt in prompts(problems, t, {})}
    return recipe


def traced() -> list:
    """Each shard computed by this process's build, as it finishes: (node, shard, rows, began, ended)."""
    import bonforge.engine.shards as shards

    out, computed = [], shards._computed

    def tracing(store, node, *args):
        for i, rows, began, ended, *rest in computed(store, node, *args):
            out.append((node.label, i, rows, began, ended))
            yield (i, rows, began, ended, *rest)

    shards._computed = tracing
    return out


def child(mode: str, recipe: str, store: str) -> None:
    """One build (``engine.streaming`` = ``mode``); prints its figures as JSON."""
    from bonforge.config import load_recipe
    from bonforge.flows.build import build
    from bonforge.storage.store import StageStore

    r = load_recipe(recipe, [f"engine.streaming={mode}"])
    computed = traced()
    t0 = time.monotonic()
    record = build(r, store, str(Path(recipe).parent)).json()
    s = StageStore(store)
    spans = {stage: [tuple(span) for k in keys for span in s.manifest(stage, k).timings.get("busy", [])]
             for stage, keys in record["stages"].items()}
    every = [span for stage in spans.values() for span in stage]
    dataset = json.loads((Path(record["dataset"]) / "manifest.json").read_text())
    begin = time.time() - (time.monotonic() - t0)  # the build's start on the epoch clock of the spans
    timeline = {stage: [round(min(a for a, _ in v) - begin, 1), round(max(b for _, b in v) - begin, 1)]
                for stage, v in spans.items() if v}
    shards = [[label, i, rows, round(a - begin, 1), round(b - begin, 1)] for label, i, rows, a, b in computed]
    print(json.dumps({"wall": time.monotonic() - t0, "sandbox_busy": union(spans["verdicts"]),
                      "stages": max(b for _, b in every) - min(a for a, _ in every), "timeline": timeline,
                      "content": dataset["content_sha256"], "shards": shards, "t0": t0}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency", type=float, default=0.5, help="seconds from a request's start to its answer")
    ap.add_argument("--rate", type=float, default=40.0, help="most requests started a second")
    ap.add_argument("--problems", type=int, default=164)
    ap.add_argument("--shard-problems", type=int, default=8, help="problems per sampling shard (both builds)")
    ap.add_argument("--builds", nargs="+", choices=("barrier", "streaming"), default=["barrier", "streaming"],
                    help="the builds to run (both: their dataset bytes compared)")
    ap.add_argument("--shards", action="store_true", help="also print each shard's rows and span")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "RECIPE", "STORE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(*args.child)
    with tempfile.TemporaryDirectory(prefix="bonforge-streaming-") as tmp:
        folder = Path(tmp)
        gpu = SimulatedGPU({f"codegen16b-{n}": i for i, n in enumerate(TEACHERS)}, args.latency, args.rate)
        recipe = setup(args, folder, gpu)
        print(f"HumanEval, {args.problems} problems, teachers a and b x 8, simulated GPU: {args.latency} s a request, "
              f"at most {args.rate:g} started a second; load average {os.getloadavg()[0]:.1f}")
        print(f"{'build':<10} {'wall s':>7} {'stages s':>9} {'generator s':>12} {'sandbox s':>10} "
              f"{'wall/busier':>12} {'stages/busier':>14} {'wall/sum':>9} {'gen. idle':>10}")
        contents = {}
        for mode in [m for m, name in (("false", "barrier"), ("true", "streaming")) if name in args.builds]:
            gpu.spans.clear()
            out = subprocess.run([sys.executable, __file__, "--child", mode, str(recipe), str(folder / mode)],
                                 capture_output=True, text=True, env={**os.environ, "BONFORGE_QUIET": "1"})
            if out.returncode:
                sys.exit(f"error: the {mode} build failed:\n{out.stderr[-3000:]}")
            res = json.loads(out.stdout.strip().splitlines()[-1])
            spans = list(gpu.spans)
            generator = union(spans)
            window = max(b for _, b, _ in spans) - min(a for a, _, _ in spans)
            busier, total = max(generator, res["sandbox_busy"]), generator + res["sandbox_busy"]
            name = "streaming" if mode == "true" else "barrier"
            contents[name] = res["content"]
            print(f"{name:<10} {res['wall']:>7.1f} {res['stages']:>9.1f} {generator:>12.1f} "
                  f"{res['sandbox_busy']:>10.1f} {res['wall'] / busier:>11.2f}x {res['stages'] / busier:>13.2f}x "
                  f"{res['wall'] / total:>8.2f}x {1 - generator / window:>9.0%}")
            print(" " * 11 + "from the build's start (s): " + ", ".join(
                f"{stage} {a:g}-{b:g}" for stage, (a, b) in res["timeline"].items()))
            if args.shards:
                for model in sorted({m for *_, m in spans}):
                    mine = [(a - res["t0"], b - res["t0"]) for a, b, m in spans if m == model]
                    print(" " * 11 + f"{model}: {len(mine)} requests, {min(a for a, _ in mine):.1f}-"
                          f"{max(b for _, b in mine):.1f} s, busy {union(mine):.1f} s")
                for label, i, rows, a, b in sorted(res["shards"], key=lambda s: s[3]):
                    print(" " * 11 + f"{label:<16} shard {i:>3} {rows:>5} rows {a:>6.1f}-{b:>6.1f} s")
        if len(contents) < 2:
            return
        same = contents["streaming"] == contents["barrier"]
        print(f"same dataset bytes: {'yes' if same else 'NO'} ({contents['streaming'][:16]})")
        if not same:
            sys.exit(1)


if __name__ == "__main__":
    main()
