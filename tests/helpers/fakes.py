"""Small fakes the tests of several packages share: a teacher, a problems table, an engine that echoes, the
brute-force majority@k that the metrics are checked against."""

from __future__ import annotations

import itertools
from collections import Counter

import pyarrow as pa

from bonforge.llm.base import Completion, Request
from bonforge.llm.config import OpenAITeacher
from bonforge.schema import PROBLEMS


def openai_teacher(**kw) -> OpenAITeacher:
    return OpenAITeacher(**{"engine": "openai", "name": "t", "model": "m", "n": 2, **kw})


def problems(*questions: str, domain: str = "math") -> pa.Table:
    return pa.Table.from_pylist([{"problem_id": f"p{i}", "source": "s", "domain": domain, "question": q}
                                 for i, q in enumerate(questions)], schema=PROBLEMS)


class EchoEngine:
    name = "echo"

    def __init__(self):
        self.requests: list[Request] = []

    def start(self):
        pass

    def generate(self, requests, progress=None):
        self.requests += requests
        return [[Completion(request_id=r.id, index=i, text=f"answer {i}", reasoning="why" if i else None,
                            finish_reason="stop", prompt_tokens=11, completion_tokens=5, seed=r.sample_seed(i),
                            engine="echo", model="m") for i in range(r.n)] for r in requests]

    def close(self):
        pass


def brute_majority(answers, correct, k):
    good = {a for a, c in zip(answers, correct) if c and a is not None}
    total = 0.0
    subsets = list(itertools.combinations(range(len(answers)), k))
    for s in subsets:
        votes = Counter(answers[i] for i in s if answers[i] is not None)
        if not votes:
            continue
        top = max(votes.values())
        tied = [a for a, v in votes.items() if v == top]
        total += sum(a in good for a in tied) / len(tied)
    return total / len(subsets)
