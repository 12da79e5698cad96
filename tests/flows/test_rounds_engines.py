"""Early stopping's rounds with ``vllm`` and ``transformers`` teachers (a fake engine that counts its model loads): a
vllm model loads once per build where the teachers fit in the cluster at once, once per round and teacher where they
do not; a transformers model on CPU loads once per build; every engine is closed at the end, on error too; the
dataset is the same either way, and the same as without early stopping."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from crash_build import build, contents

import bonforge.llm
from bonforge.llm import held
from bonforge.llm.base import Completion
from bonforge.storage.store import StageStore

RIGHT_OF_8 = (8, 7, 6, 0, 2, 8, 5, 3)  # problem i: right for this many of every 8 seeds in a row


class FakeEngine:
    """Loads a "model" on start (counted), answers "What is i + 2i?" right for ``RIGHT_OF_8[i - 1]`` of every 8
    seeds; ``fail_at``: the generate call (1-based, over all fakes) that raises."""

    loads = closes = calls = 0
    fail_at: int | None = None

    def __init__(self, teacher):
        self.teacher, self.name, self.loaded = teacher, teacher.engine, False

    def start(self) -> None:
        if not self.loaded:
            FakeEngine.loads += 1
            self.loaded = True

    def generate(self, requests, progress=None):
        assert self.loaded, "generate before start"
        FakeEngine.calls += 1
        if FakeEngine.calls == FakeEngine.fail_at:
            raise RuntimeError("the replica died")
        out = []
        for r in requests:
            i = int(re.search(r"What is (\d+) \+", r.messages[0]["content"]).group(1))
            comps = []
            for k in range(r.n):
                seed = r.sample_seed(k)
                value = 3 * i if seed % 8 < RIGHT_OF_8[i - 1] else 3 * i + 1
                comps.append(Completion(r.id, k, f"{self.teacher.model}: \\boxed{{{value}}} ({seed})", None, "stop",
                                        5, 3, seed, self.name, self.teacher.model))
            out.append(comps)
        return out

    def close(self) -> None:
        if self.loaded:
            FakeEngine.closes += 1
            self.loaded = False


@pytest.fixture
def fake(monkeypatch):
    make = bonforge.llm.make_engine
    monkeypatch.setattr(bonforge.llm, "make_engine",
                        lambda t: FakeEngine(t) if t.engine in ("vllm", "transformers") else make(t))
    for name, value in (("loads", 0), ("closes", 0), ("calls", 0), ("fail_at", None)):
        monkeypatch.setattr(FakeEngine, name, value)
    return FakeEngine


def cluster(monkeypatch, **resources):
    monkeypatch.setattr(held, "_ray_resources", lambda: resources)


def write(folder: Path, teachers: int, engine: str = "engine: vllm") -> Path:
    rows = [{"id": f"q{i}", "question": f"What is {i} + {2 * i}?", "answer": str(3 * i)}
            for i in range(1, len(RIGHT_OF_8) + 1)]
    (folder / "problems.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    vllm = f"{engine}, n: 4, max_tokens: 8, shard_problems: 3"
    lines = "\n".join(f"  - {{name: t{k}, model: org/m{k}, {vllm}}}" for k in range(teachers))
    path = folder / "recipe.yaml"
    path.write_text(f"""
name: held
problems: {{name: toy, source: {{path: problems.jsonl}}, fields: {{id: id}}}}
teachers:
{lines}
filter: {{max_pass_rate: 0.5, early_stop: true}}
engine: {{streaming: false}}  # in rounds unless a test streams (--set engine.streaming=true)
export: {{name: toy-genselect, allow_empty: true, rl: {{name: toy-rl}}}}
""")
    return path



def sampling_rounds(record: dict) -> int:
    return sum(1 for label, rows in record["rows"].items() if "@round" in label and label.startswith("candidates")
               and rows["computed"])


def test_one_vllm_teacher_loads_its_model_once_for_all_rounds(tmp_path, fake, monkeypatch):
    cluster(monkeypatch, GPU=1.0, CPU=4.0)
    recipe = write(tmp_path, 1)
    early = build(tmp_path / "early", recipe)
    assert sampling_rounds(early) >= 2
    assert (fake.loads, fake.closes) == (1, 1)

    full = build(tmp_path / "full", recipe, "filter.early_stop=false")
    assert contents(tmp_path / "early", early) == contents(tmp_path / "full", full)


def test_teachers_that_do_not_fit_at_once_load_per_round_and_give_the_same_dataset(tmp_path, fake, monkeypatch):
    recipe = write(tmp_path, 2)
    cluster(monkeypatch, GPU=2.0, CPU=4.0)  # both fit: one load each
    both = build(tmp_path / "both", recipe)
    assert (fake.loads, fake.closes) == (2, 2)

    cluster(monkeypatch, GPU=1.0, CPU=4.0)  # one GPU: a held engine would starve the other teacher's
    fake.loads = fake.closes = 0
    each = build(tmp_path / "each", recipe)
    assert fake.loads == fake.closes == sampling_rounds(each) > 2
    assert contents(tmp_path / "each", each) == contents(tmp_path / "both", both)
    assert each["stages"] == both["stages"]  # holding is no part of any key


def test_a_failed_round_closes_the_held_engine(tmp_path, fake, monkeypatch):
    cluster(monkeypatch, GPU=1.0, CPU=4.0)
    fake.fail_at = 4  # round 1: 8 problems in shards of 3, three calls; the 4th is in round 2
    with pytest.raises(RuntimeError, match="replica died"):
        build(tmp_path / "store", write(tmp_path, 1))
    assert fake.loads == fake.closes == 1


def test_a_transformers_teacher_on_cpu_loads_its_model_once_for_all_rounds(tmp_path, fake):
    recipe = write(tmp_path, 1, "engine: transformers, batch_size: 1")
    early = build(tmp_path / "early", recipe)
    assert sampling_rounds(early) >= 2
    assert (fake.loads, fake.closes) == (1, 1)  # no Ray look-up: a local model reserves nothing there

    full = build(tmp_path / "full", recipe, "filter.early_stop=false")
    assert contents(tmp_path / "early", early) == contents(tmp_path / "full", full)


def test_without_rounds_each_teacher_loads_once_even_where_they_do_not_fit_at_once(tmp_path, fake, monkeypatch):
    """``engine.streaming``: the samples are drawn first, each engine loaded once; the rounds' stages then find
    them drawn and load nothing (in rounds, the control, one load per round and teacher)."""
    recipe = write(tmp_path, 2)
    cluster(monkeypatch, GPU=1.0, CPU=4.0)
    streamed = build(tmp_path / "streamed", recipe, "engine.streaming=true")
    assert fake.loads == fake.closes == 2
    fake.loads = fake.closes = 0
    in_rounds = build(tmp_path / "rounds", recipe, "engine.streaming=false")
    assert fake.loads == fake.closes == sampling_rounds(in_rounds) > 2
    assert contents(tmp_path / "streamed", streamed) == contents(tmp_path / "rounds", in_rounds)
    assert streamed["stages"] == in_rounds["stages"]


def test_a_failed_stream_closes_the_held_engine(tmp_path, fake, monkeypatch):
    cluster(monkeypatch, GPU=1.0, CPU=4.0)
    fake.fail_at = 2
    with pytest.raises(RuntimeError, match="replica died"):
        build(tmp_path / "store", write(tmp_path, 1), "engine.streaming=true")
    assert fake.loads == fake.closes == 1


def test_without_rounds_each_sample_is_judged_once(tmp_path, fake, monkeypatch):
    """The verdicts judged beside the engine are lent to the rounds' verdicts stages (``verify.Judged``): the
    judge sees each sample once, as in rounds (the control), where each round judges its new samples only."""
    from bonforge.judging import math as verify_math

    judged, real = [], verify_math.verify_math

    def counted(candidates, problems, cfg):
        judged.extend(candidates.column("candidate_id").to_pylist())
        return real(candidates, problems, cfg)

    monkeypatch.setattr(verify_math, "verify_math", counted)
    cluster(monkeypatch, GPU=1.0, CPU=4.0)
    recipe = write(tmp_path, 1)
    for mode in ("true", "false"):
        judged.clear()
        record = build(tmp_path / mode, recipe, f"engine.streaming={mode}")
        (key,) = record["stages"]["candidates"]
        drawn = StageStore(tmp_path / mode).read("candidates", key, ["candidate_id"]).column("candidate_id")
        assert sorted(judged) == sorted(drawn.to_pylist())
