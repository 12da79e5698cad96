"""What a prompted judge costs per candidate, and bonforge's overhead on top of the engine: the pointwise judge
(the ``scores`` stage's compute with one judge scorer) and the pairwise evaluation (the ``pairwise`` stage's
compute, both orders) against the same requests sent straight to the engine. Per candidate (pointwise) and
per pair (pairwise, two games): requests, prompt and completion tokens, seconds; and raw / stage (target
>= 0.9: the stage adds at most a tenth); each figure the best of --rounds.

`PYTHONPATH=$PWD python benchmarks/judge_overhead.py [--n 32] [--delay-ms 50] [--engine openai|transformers]`

``openai`` (default): a local OpenAI-compatible server (the tests' scripted one) that answers after
``--delay-ms`` with a rating and a label, so that the figures are bonforge's and not a model's; its token
counts are the server's estimate (characters / 4). ``transformers``: SmolLM2-135M-Instruct on this CPU (real
tokens; keep --n small). The requests are arena-hard v0.1's, the answers gpt-4-0314's and gpt-3.5-turbo's."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pyarrow as pa
from _common import DATA

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))  # the test server


def tables(n: int) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(problems, candidates of gpt-4-0314, pairs gpt-3.5 vs gpt-4-0314) of the first ``n`` requests."""
    root = DATA / "arena-hard" / "v0.1"
    questions = [json.loads(line) for line in (root / "question.jsonl").open()][:n]
    answers = {t: {r["uid"]: r["messages"][-1]["content"]["answer"]
                   for r in map(json.loads, (root / "model_answer" / f"{t}.jsonl").open())}
               for t in ("gpt-4-0314", "gpt-3.5-turbo-0125")}
    ids = [q["uid"] for q in questions]
    problems = pa.table({"problem_id": ids, "domain": ["open"] * n, "question": [q["prompt"] for q in questions],
                         "answer": pa.nulls(n, pa.string()), "metadata": pa.nulls(n, pa.string())})
    cands = pa.table({"candidate_id": [f"{p}/gpt-4-0314/0" for p in ids], "problem_id": ids,
                      "teacher": ["gpt-4-0314"] * n, "text": [answers["gpt-4-0314"][p] for p in ids]})
    pairs = pa.table({"problem_id": ids, "question": [q["prompt"] for q in questions],
                      "contender_id": [f"{p}/gpt-3.5-turbo-0125/0" for p in ids],
                      "contender_text": [answers["gpt-3.5-turbo-0125"][p] for p in ids],
                      "baseline_id": [f"{p}/gpt-4-0314/0" for p in ids],
                      "baseline_text": [answers["gpt-4-0314"][p] for p in ids],
                      "contender": ["teacher:gpt-3.5-turbo-0125"] * n, "baseline": ["teacher:gpt-4-0314"] * n})
    return problems, cands, pairs


def _reply(n: int, body: dict):
    from llm_server import answer

    reply = answer(body)
    reply["choices"][0]["message"]["content"] = "Both are fine; A is a little clearer.\n[[A>B]] [[7]]"
    return 200, {}, reply


ROUNDS = 3


def _timed(fn) -> tuple[float, object]:
    """The best of ``ROUNDS`` timings of ``fn()`` (load on a shared machine only ever adds), and its output."""
    best = float("inf")
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def measure(judge: dict, n: int) -> dict:
    from bonforge.config import EvaluateConfig
    from bonforge.llm import make_engine
    from bonforge.llm.base import Request
    from bonforge.scoring import judge as pointwise
    from bonforge.scoring.config import JudgeScorer
    from bonforge.stages import pairwise, scores

    problems, cands, pairs = tables(n)
    scorer = JudgeScorer(name="judge", kind="judge", judge=judge)
    ev = EvaluateConfig(judge=judge, baseline="teacher:gpt-4-0314", contenders=["teacher:gpt-3.5-turbo-0125"])
    j = scorer.judge
    ask = lambda prompts: [Request(id=str(i), messages=({"role": "user", "content": p},), n=1,  # noqa: E731
                                   temperature=j.temperature, top_p=j.top_p, max_tokens=j.max_tokens, seed=j.seed)
                           for i, p in enumerate(prompts)]
    template = pointwise.load_template(scorer)
    single = ask([pointwise.fill(template, {"question": q, "answer": t})
                  for q, t in zip(problems.column("question").to_pylist(), cands.column("text").to_pylist())])
    pair_template = pairwise.load_template(ev)
    both = ask([pairwise.fill_pair(pair_template, q, *ab) for q, c, b in zip(
        *(pairs.column(x).to_pylist() for x in ("question", "contender_text", "baseline_text")))
        for ab in ((b, c), (c, b))])
    engine = make_engine(j)
    engine.start()
    engine.generate(single[:1])  # warm-up: the model's load is not the judge's cost
    raw_point, replies = _timed(lambda: engine.generate(single))
    raw_pair, pair_replies = _timed(lambda: engine.generate(both))
    engine.close()
    with scores.Scoring(scores.ScoresParams((scorer,))) as compute:
        compute(cands.slice(0, 1), problems)
        stage_point, _ = _timed(lambda: compute(cands, problems))
    with pairwise.Judging(pairwise.PairwiseParams(ev)) as compute:
        compute(pairs.slice(0, 1))
        stage_pair, _ = _timed(lambda: compute(pairs))
    tokens = lambda rs: (sum(r[0].prompt_tokens or 0 for r in rs if r), sum(r[0].completion_tokens or 0  # noqa: E731
                                                                          for r in rs if r))
    return {"pointwise": {"n": n, "requests": len(single), "tokens": tokens(replies), "raw_s": raw_point,
                          "stage_s": stage_point},
            "pairwise": {"n": n, "requests": len(both), "tokens": tokens(pair_replies), "raw_s": raw_pair,
                         "stage_s": stage_pair}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32, help="requests (candidates; pairs for the pairwise judge)")
    ap.add_argument("--delay-ms", type=float, default=50.0, help="the scripted server's time per request")
    ap.add_argument("--engine", choices=("openai", "transformers"), default="openai")
    ap.add_argument("--max-tokens", type=int, default=32, help="engine transformers: tokens per judgment")
    ap.add_argument("--rounds", type=int, default=3, help="timings per figure, the best kept")
    args = ap.parse_args()
    global ROUNDS
    ROUNDS = args.rounds
    if args.engine == "transformers":
        got = measure({"name": "j", "engine": "transformers", "model": "smollm2-135m-instruct", "temperature": 0,
                       "max_tokens": args.max_tokens}, args.n)
    else:
        from llm_server import ScriptedServer

        with ScriptedServer(_reply, delay_s=args.delay_ms / 1000) as server:
            got = measure({"name": "j", "engine": "openai", "model": "judge", "base_url": server.url,
                           "api_key_env": None, "temperature": 0, "max_tokens": 64}, args.n)
    for kind, r in got.items():
        unit = "candidate" if kind == "pointwise" else "pair"
        per = r["stage_s"] / r["n"]
        print(f"{kind:<9} {r['requests']:4d} requests  {r['tokens'][0] / r['n']:8.0f} prompt + "
              f"{r['tokens'][1] / r['n']:5.0f} completion tokens per {unit}  {per * 1000:8.1f} ms per {unit}  "
              f"raw {r['raw_s']:.2f} s  stage {r['stage_s']:.2f} s")
    for kind, r in got.items():
        print(f"{kind} raw / stage: {r['raw_s'] / r['stage_s']:.2f}x (target >= 0.9)")


if __name__ == "__main__":
    main()
