"""Reward-model scores per second, the engines side by side on the same conversations: transformers and
vLLM offline (CPU here), both on the test reward model (SmolLM2-135M with a seeded head), and how far their
scores differ. `PYTHONPATH=$PWD python benchmarks/reward_model.py [--n 48] [--max-length 512]`.

Each engine runs in a fresh interpreter (vLLM spawns its engine process); the conversations are arena-hard
v0.1 requests with gpt-4-0314's answers, or those of ``--items FILE`` (a JSON list of ``{"question", "text"}``),
cut from the left to --max-length tokens. ``--scores FILE`` writes each engine's scores there (JSON: engine ->
scores in the conversations' order): the real-model test of the scorer checks vLLM's against its own."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from _common import DATA, REPO

PROBE = textwrap.dedent("""
    import json, sys, time
    from bonforge.scoring.config import RewardModelScorer
    from bonforge.scoring import Item, open_scorer
    if __name__ == "__main__":
        spec = json.loads(sys.stdin.read())
        t0 = time.perf_counter()
        scorer = open_scorer(RewardModelScorer(**spec["cfg"]))
        load = time.perf_counter() - t0
        items = [Item(**i) for i in spec["items"]]
        scorer.score(items[:2])  # warm-up
        t0 = time.perf_counter()
        values = [r.value for r in scorer.score(items)]
        print("RESULT", json.dumps({"load_s": load, "score_s": time.perf_counter() - t0, "values": values}))
""")


def items(n: int) -> list[dict]:
    root = DATA / "arena-hard" / "v0.1"
    questions = {r["uid"]: r["prompt"] for r in map(json.loads, (root / "question.jsonl").open())}
    answers = [json.loads(line) for line in (root / "model_answer" / "gpt-4-0314.jsonl").open()][:n]
    return [{"question": questions[a["uid"]], "text": a["messages"][-1]["content"]["answer"]} for a in answers]


def run(engine: str, conversations: list[dict], max_length: int) -> dict:
    cfg = {"kind": "reward_model", "name": "rm", "model": "smollm2-135m-instruct-rm", "allow_random_head": True,
           "engine": engine, "max_length": max_length, "batch_size": 8}
    done = subprocess.run([sys.executable, "-c", PROBE], input=json.dumps({"cfg": cfg, "items": conversations}),
                          capture_output=True, text=True, cwd=REPO, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{engine} failed: {done.stderr[-2000:]}")
    return json.loads(line[7:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--items", type=Path, help="conversations to score instead of arena-hard's (--n is ignored)")
    ap.add_argument("--scores", type=Path, help="write each engine's scores here (JSON)")
    args = ap.parse_args()
    conversations = json.loads(args.items.read_text()) if args.items else items(args.n)
    got = {e: run(e, conversations, args.max_length) for e in ("transformers", "vllm")}
    if args.scores:
        args.scores.write_text(json.dumps({e: r["values"] for e, r in got.items()}))
    for engine, r in got.items():
        print(f"{engine:<13} load {r['load_s']:6.1f} s   {len(conversations) / r['score_s']:6.2f} scores/s")
    diff = max(abs(a - b) for a, b in zip(got["transformers"]["values"], got["vllm"]["values"]))
    print(f"vllm / transformers: {got['transformers']['score_s'] / got['vllm']['score_s']:.2f}x   "
          f"largest score difference {diff:.2e} (target <= 1e-3)")


if __name__ == "__main__":
    main()
