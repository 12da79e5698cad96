"""The sampling stage's pure parts: stage key, seeds, prompts, the table it writes (fake engine); its progress
moving within one shard (the scripted OpenAI-compatible server)."""

from __future__ import annotations

import logging

import pytest
from llm_server import ScriptedServer

from bonforge.errors import ConfigError, DataError
from bonforge.llm.base import problem_seed
from bonforge.llm.config import TransformersTeacher
from bonforge.llm.models import model_identity
from bonforge.schema import CANDIDATES
from bonforge.storage.store import StageStore
from bonforge.engine import run_node
from bonforge.stage import Ref, RowsMissingForNow
from bonforge.stages import sample
from bonforge.stages.sample import Sampler, key_config
from bonforge.templates import render
from fakes import EchoEngine, openai_teacher, problems


def test_render_keeps_other_braces():
    assert render("Put it in \\boxed{}.\n{question}", "x^{2}") == "Put it in \\boxed{}.\nx^{2}"


def test_problem_seed_is_stable_and_distinct():
    assert problem_seed(0, "gsm8k/1") == problem_seed(0, "gsm8k/1")
    assert len({problem_seed(0, f"gsm8k/{i}") for i in range(1000)}) == 1000
    assert problem_seed(1, "gsm8k/1") != problem_seed(0, "gsm8k/1")
    assert 0 <= problem_seed(7, "x") < 2**31


def test_sampler_writes_candidates_with_ids_seeds_and_tokens():
    engine = EchoEngine()
    t = openai_teacher()
    out = Sampler(t, engine)(problems("What is 1+1?", "What is 2+2?"))
    assert out.schema == CANDIDATES and out.num_rows == 4
    rows = out.sort_by("candidate_id").to_pylist()
    assert rows[1]["candidate_id"] == "p0/t/1" and rows[1]["reasoning"] == "why" and rows[1]["text"] == "answer 1"
    assert rows[1]["seed"] == problem_seed(0, "p0") + 1 and rows[1]["reference_correct"] is None
    req = engine.requests[0]
    assert "What is 1+1?" in req.messages[0]["content"] and "\\boxed{}" in req.messages[0]["content"]
    assert (req.n, req.max_tokens, req.temperature) == (t.n, t.max_tokens, t.temperature)


def test_code_problems_use_the_code_template():
    engine = EchoEngine()
    Sampler(openai_teacher(), engine)(problems("Print hello.", domain="code"))
    assert "```python" in engine.requests[0].messages[0]["content"]


def test_empty_question_names_the_problem():
    with pytest.raises(DataError, match=r"problems, record p1, field 'question': empty question"):
        Sampler(openai_teacher(), EchoEngine())(problems("ok", " "))


def test_unknown_domain_names_the_problem():
    with pytest.raises(DataError, match=r"problems, record p0, field 'domain': unknown domain 'bio'"):
        Sampler(openai_teacher(), EchoEngine())(problems("x?", domain="bio"))


def test_key_changes_with_template_params_and_model_but_not_exec_settings(tmp_path):
    tpl = tmp_path / "t.txt"
    tpl.write_text("Q: {question}")
    base = key_config(openai_teacher(prompt_template=str(tpl)))
    assert base == key_config(openai_teacher(prompt_template=str(tpl), base_url="http://other/v1",
                                             max_concurrency=3))
    assert base != key_config(openai_teacher(prompt_template=str(tpl), temperature=0.1))
    assert base != key_config(openai_teacher(prompt_template=str(tpl), revision="abc"))
    tpl.write_text("Question: {question}")
    assert base != key_config(openai_teacher(prompt_template=str(tpl)))
    assert set(key_config(openai_teacher())["prompt_template"]) == {"math", "code"}


def test_bad_template_fails_naming_the_teacher(tmp_path):
    tpl = tmp_path / "t.txt"
    tpl.write_text("no placeholder")
    with pytest.raises(ConfigError, match=r"teachers.t.prompt_template: .* has no \{question\} placeholder"):
        key_config(openai_teacher(prompt_template=str(tpl)))
    with pytest.raises(ConfigError, match=r"teachers.t.prompt_template: cannot read"):
        key_config(openai_teacher(prompt_template=str(tmp_path / "missing.txt")))


def test_local_model_identity_follows_the_files(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    first = model_identity(str(tmp_path), None)
    assert "local_dir_sha256" in first and model_identity(str(tmp_path), None) == first
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 10)
    assert model_identity(str(tmp_path), None) != first
    t = TransformersTeacher(engine="transformers", name="x", model=str(tmp_path))
    assert key_config(t)["model"] == model_identity(str(tmp_path), None)
    assert model_identity("Qwen/Qwen3-1.7B", "main") == {"name": "Qwen/Qwen3-1.7B", "revision": "main"}


def test_stage_key_is_known_before_running(tmp_path):
    t = openai_teacher()
    store = StageStore(tmp_path)
    store.write_shard("problems", "pk", 0, problems("a?", "b?"))
    ref = Ref("problems", "pk", store.commit("problems", "pk", 1, version="1", config={}, upstream={}))
    node = sample.node(ref, t, engine=EchoEngine())
    assert node.key == sample.node(Ref("problems", "pk"), t).key != sample.node(Ref("problems", "other"), t).key
    man = run_node(store, node)
    assert man["key"] == node.key and man["upstream"] == {"problems": "pk"} and man["config"] == key_config(t)
    assert man["tokens"] == {"prompt": 44, "completion": 20} and man["teacher"] == "t"


class SkipsLong(EchoEngine):
    """Answers every request except those whose question mentions 'long' (as if over the window)."""

    def generate(self, requests, progress=None):
        out = super().generate(requests)
        return [[] if "long" in r.messages[0]["content"] else cs for r, cs in zip(requests, out)]


def test_a_skipped_prompt_is_reported_although_it_has_no_rows(tmp_path):
    store = StageStore(tmp_path)
    table = problems("a?", "a long one?", "b?")
    store.write_shard("problems", "pk", 0, table)
    ref = Ref("problems", "pk", store.commit("problems", "pk", 1, version="1", config={}, upstream={}))
    man = run_node(store, sample.node(ref, openai_teacher(), engine=SkipsLong()))
    assert man["rows"] == 4 and man["skipped_requests"] == 1
    assert man["problems_short_of_n"] == ["p1"] and man["problems_short_of_n_count"] == 1


def test_one_shard_of_problems_moves_as_its_samples_come_back(tmp_path, caplog, monkeypatch):
    """12 problems in one shard: the progress says rows done before the shard is written (not 0/12, then
    12/12)."""
    monkeypatch.delenv("BONFORGE_QUIET", raising=False)
    store = StageStore(tmp_path)
    store.write_shard("problems", "pk", 0, problems(*(f"What is {i} + {i}?" for i in range(12))))
    ref = Ref("problems", "pk", store.commit("problems", "pk", 1, version="1", config={}, upstream={}))
    with ScriptedServer(delay_s=0.02) as server, caplog.at_level(logging.INFO, "bonforge"):
        t = openai_teacher(base_url=server.url, n=2, max_concurrency=2)
        man = run_node(store, sample.node(ref, t))
    assert man["rows"] == 24 and t.shard_problems >= 12  # one shard
    counts = [int(r.getMessage().split(": ")[1].split("/")[0]) for r in caplog.records
              if r.getMessage().startswith("candidates[t]: ") and "rows" in r.getMessage()]
    assert counts[-1] == 12 and len([c for c in counts if 0 < c < 12]) >= 5, counts


def test_a_sample_refused_past_its_retries_costs_only_its_own_row(tmp_path):
    """8 problems x 2 samples in two shards; one sample is refused (429) on every try. The stage asks every
    other sample, keeps them all (one shard done, one partial), fails naming the missing row and why; the next
    try asks for that one sample only and commits all 16 rows, the same as a build that never failed."""
    store = StageStore(tmp_path)
    store.write_shard("problems", "pk", 0, problems(*(f"What is {i} + {i}?" for i in range(8))))
    ref = Ref("problems", "pk", store.commit("problems", "pk", 1, version="1", config={}, upstream={}))
    refused = {"on": True}

    def script(n, body):
        stubborn = "What is 5 + 5?" in body["messages"][0]["content"] and body["seed"] % 2 == 1
        return (429, {"Retry-After": "0"}, {"error": "busy"}) if stubborn and refused["on"] else (200, {}, None)

    with ScriptedServer(script) as server:
        t = openai_teacher(base_url=server.url, n=2, shard_problems=4, max_retries=1, api_key_env=None)
        node = sample.node(ref, t)
        with pytest.raises(RowsMissingForNow, match=r"1 rows missing \(HTTP 429: 1\); every row received is kept"):
            run_node(store, node)
        assert server.count == 15 + 2  # every other sample once, the stubborn one twice
        assert not store.exists("candidates", node.key) and store.done_shards("candidates", node.key) == {0}
        assert len(store.partials("candidates", node.key)) == 1
        refused["on"] = False
        before = server.count
        man = run_node(store, node)
        assert server.count - before == 1  # the missing sample only
    assert man["rows"] == 16 and store.partials("candidates", node.key) == []
    got = store.read("candidates", node.key).sort_by("candidate_id")
    with ScriptedServer() as clean:
        fresh_store = StageStore(tmp_path / "fresh")
        fresh_store.write_shard("problems", "pk", 0, problems(*(f"What is {i} + {i}?" for i in range(8))))
        fresh_ref = Ref("problems", "pk", fresh_store.commit("problems", "pk", 1, version="1", config={}, upstream={}))
        fresh = run_node(fresh_store, sample.node(fresh_ref, t.model_copy(update={"base_url": clean.url})))
    assert fresh.key == man.key
    want = fresh_store.read("candidates", fresh.key).sort_by("candidate_id")
    assert got.equals(want)


def test_a_tool_teachers_samples_are_keyed_by_the_sandbox_its_calls_run_in():
    """A tool call's output depends on the sandbox's limits (memory, output cap, image): trajectories sampled
    under one are not reused under another, in the stage key and each sample's identity; the sandbox settings
    that only say how to run (pool size) and a teacher without the tool key as before; early stopping's
    rounds and the fusor run the calls in the recipe's sandbox too."""
    from bonforge.llm.config import PythonTool
    from bonforge.sandbox.config import CodeVerifyConfig

    tool, plain = openai_teacher(python_tool=PythonTool()), openai_teacher()
    small, big = CodeVerifyConfig(memory_mb=256), CodeVerifyConfig(memory_mb=4096)
    assert key_config(tool, small) != key_config(tool, big)
    assert sample.sample_settings(tool, small) != sample.sample_settings(tool, big)
    assert sample.sample_settings(tool, small) == sample.sample_settings(tool, CodeVerifyConfig(memory_mb=256,
                                                                                                 pool_size=3))
    assert key_config(plain, small) == key_config(plain, big) == key_config(plain)  # control
    problems_ref = Ref("problems", "k" * 64)
    for final in (False, True):
        node = sample.round_node(problems_ref, Ref("rounds", "r" * 64), tool, final, sandbox=small)
        assert node.params.sandbox is small and node.config == key_config(tool, small)
    fusor = sample.fusor_node(Ref("fusion_pools", "f" * 64), tool, sandbox=small)  # a fusor may call the tool too
    assert fusor.params.sandbox is small and fusor.config == key_config(tool, small)
