"""Row-level reuse stage by stage (no Prefect): samples counted in requests to the real test server, code
verdicts in programs run in the Docker sandbox; the look-up trusts only committed outputs, and a missing or
unreadable file means recompute."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from llm_server import ScriptedServer

from bonforge.config import Recipe
from bonforge.engine import run_node
from bonforge.llm.base import problem_seed
from bonforge.llm.config import OpenAITeacher
from bonforge.schema import CANDIDATES, PROBLEMS
from bonforge.stage import Ref
from bonforge.stages import sample, verify
from bonforge.storage.store import StageStore


def problems(count: int, start: int = 0, domain: str = "math", tests=None) -> pa.Table:
    rows = [{"problem_id": f"p{i:03d}", "source": "t", "domain": domain, "question": f"What is {i} + {i}?",
             "answer": str(2 * i), "tests": tests(i) if tests else None, "metadata": "{}"}
            for i in range(start, start + count)]
    return pa.Table.from_pylist(rows, schema=PROBLEMS)


def teacher(url: str, **kw) -> OpenAITeacher:
    fields = {"name": "s", "model": "m", "n": 8, "max_tokens": 16, "shard_problems": 4, **kw}
    return OpenAITeacher(engine="openai", base_url=url, api_key_env=None, **fields)


def sampled(store: StageStore, key: str, table: pa.Table, t: OpenAITeacher, reuse_rows: bool = True) -> dict:
    if not store.exists("problems", key):
        store.write_shard("problems", key, 0, table)
        store.commit("problems", key, 1, version="1", config={}, upstream={})
    return run_node(store, sample.node(Ref("problems", key), t), reuse_rows)


def test_n_8_to_16_draws_8_new_samples_per_problem(tmp_path):
    store, scratch = StageStore(tmp_path / "a"), StageStore(tmp_path / "b")
    with ScriptedServer() as server:
        sampled(store, "pk", problems(5), teacher(server.url))
        assert server.count == 5 * 8
        man = sampled(store, "pk", problems(5), teacher(server.url, n=16))
        assert server.count == 5 * 16
        assert sorted({b["seed"] for b in server.bodies[40:]}) == sorted(
            problem_seed(0, f"p{i:03d}") + j for i in range(5) for j in range(8, 16))
        assert (man["rows_computed"], man["rows_reused"], man["rows"]) == (40, 40, 80)
        fresh = sampled(scratch, "pk", problems(5), teacher(server.url, n=16))
    assert store.read("candidates", man["key"]).equals(scratch.read("candidates", fresh["key"]))


def test_a_teacher_renamed_reuses_a_changed_setting_resamples(tmp_path):
    store = StageStore(tmp_path)
    with ScriptedServer() as server:
        sampled(store, "pk", problems(3), teacher(server.url))
        renamed = sampled(store, "pk", problems(3), teacher(server.url).model_copy(update={"name": "t2"}))
        assert server.count == 24 and renamed["rows_reused"] == 24
        assert set(store.read("candidates", renamed["key"]).column("teacher").to_pylist()) == {"t2"}
        for change in ({"temperature": 0.9}, {"revision": "v2"}, {"max_tokens": 17}):
            before = server.count
            man = sampled(store, "pk", problems(3), teacher(server.url, **change))
            assert server.count - before == 24 and man["rows_reused"] == 0, change
        again = sampled(store, "pk", problems(3), teacher(server.url, max_tokens=17), reuse_rows=False)
        assert server.count == 24 * 5 and again["rows_reused"] == 0  # computed again although committed


def test_only_committed_readable_outputs_are_reused(tmp_path):
    store = StageStore(tmp_path)
    with ScriptedServer() as server:
        first = sampled(store, "pa", problems(4), teacher(server.url))
        d = store.stage_dir("candidates", first["key"])
        manifest = (d / "manifest.json").read_bytes()
        (d / "manifest.json").unlink()  # as after a crash before the commit: its index must not be used
        sampled(store, "pb", problems(5), teacher(server.url))
        assert server.count == 32 + 40
        (d / "manifest.json").write_bytes(manifest)
        (store.stage_dir("candidates", sampled(store, "pb", problems(5), teacher(server.url))["key"])
         / "rows.parquet").write_bytes(b"not parquet")  # an unreadable index: recompute, never crash
        for f in d.glob("part-*.parquet"):
            f.unlink()  # a committed output whose data is gone: recompute
        man = sampled(store, "pc", problems(6), teacher(server.url))
        assert server.count == 72 + 48 and man["rows_reused"] == 0
        assert store.read("candidates", man["key"]).num_rows == 48


def test_reuse_on_s3(s3_env, seaweedfs):
    store = StageStore(seaweedfs.url())
    with ScriptedServer() as server:
        sampled(store, "pa", problems(4), teacher(server.url))
        man = sampled(store, "pb", problems(5), teacher(server.url))
        assert server.count == 40 and (man["rows_computed"], man["rows_reused"]) == (8, 32)


# -- verdicts ----------------------------------------------------------------------------------------------
def candidates_of(table: pa.Table, texts) -> pa.Table:
    rows = [{"candidate_id": f"{pid}/t/{j}", "problem_id": pid, "teacher": "t", "sample_index": j, "text": text(pid, j),
             "seed": j} for pid in table.column("problem_id").to_pylist() for j, text in enumerate(texts)]
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in CANDIDATES} for r in rows], schema=CANDIDATES)


def verdicts(store: StageStore, key: str, table: pa.Table, cands: pa.Table, recipe: Recipe, domain="math") -> dict:
    for stage, t in (("problems", table), ("candidates", cands)):
        store.write_shard(stage, key, 0, t)
        store.commit(stage, key, 1, version="1", config={}, upstream={}, extra={"teacher": "t"})
    candidates = Ref("candidates", key, store.manifest("candidates", key))
    node = verify.node(recipe, Ref("problems", key), candidates, {domain})
    return run_node(store, node)


RECIPE = {"name": "r", "problems": {"name": "t", "source": {"path": "x"}}, "teachers": [
    {"name": "t", "engine": "pool", "source": {"path": "x"}, "samples": "s"}], "export": {"name": "d"}}


def test_math_verdicts_recomputed_only_where_gold_or_settings_changed(tmp_path):
    store = StageStore(tmp_path)
    texts = [lambda pid, j: f"\\boxed{{{int(pid[1:]) * 2}}}", lambda pid, j: "\\boxed{7}"]
    recipe = Recipe.model_validate(RECIPE)
    first = verdicts(store, "a", problems(3), candidates_of(problems(3), texts), recipe)
    assert (first["rows_computed"], first["rows_reused"]) == (6, 0)
    gold = problems(3).to_pylist()
    gold[1]["answer"] = "7"
    fixed = verdicts(store, "b", pa.Table.from_pylist(gold, schema=PROBLEMS), candidates_of(problems(3), texts), recipe)
    assert (fixed["rows_computed"], fixed["rows_reused"]) == (2, 4)
    out = {r["candidate_id"]: r["correct"] for r in store.read("verdicts", fixed["key"]).to_pylist()}
    assert out["p001/t/1"] and not out["p001/t/0"] and out["p002/t/0"]
    looser = Recipe.model_validate({**RECIPE, "verify": {"math": {"float_rounding": 2}}})
    changed = verdicts(store, "c", problems(3), candidates_of(problems(3), texts), looser)
    assert (changed["rows_computed"], changed["rows_reused"]) == (6, 0)


@pytest.mark.docker
def test_code_verdicts_count_programs_run(tmp_path, sandbox_image, monkeypatch):
    """Programs counted at the sandbox pool: a changed test spec re-runs that problem's programs only."""
    from bonforge.sandbox import pool as sandbox_pool

    programs: list[int] = []
    real_run = sandbox_pool.SandboxPool.run

    def counting(self, requests, on_outcome=None):
        programs.append(len(requests))
        return real_run(self, requests, on_outcome)

    monkeypatch.setattr(sandbox_pool.SandboxPool, "run", counting)

    def spec(i: int, output: int | None = None) -> str:
        expected = str(i if output is None else output)
        return json.dumps({"kind": "stdio", "tests": [{"input": "", "output": expected}]})

    texts = [lambda pid, j: f"```python\nprint({int(pid[1:])})\n```", lambda pid, j: "```python\nprint(-1)\n```"]
    recipe = Recipe.model_validate({**RECIPE, "verify": {"code": {"image": sandbox_image, "pool_size": 1}}})
    store = StageStore(tmp_path)
    table = problems(3, domain="code", tests=spec)
    first = verdicts(store, "a", table, candidates_of(table, texts), recipe, "code")
    assert sum(programs) == 6 and first["rows_computed"] == 6
    changed = problems(3, domain="code", tests=lambda i: spec(i, -1 if i == 2 else None))
    fixed = verdicts(store, "b", changed, candidates_of(changed, texts), recipe, "code")
    assert sum(programs) == 6 + 2 and (fixed["rows_computed"], fixed["rows_reused"]) == (2, 4)
    statuses = {r["candidate_id"]: r["status"] for r in store.read("verdicts", fixed["key"]).to_pylist()}
    assert statuses["p002/t/1"] == "passed" and statuses["p002/t/0"] == "wrong_answer"
    verdicts(store, "c", changed, candidates_of(changed, texts), recipe, "code")  # the same again: nothing runs
    assert sum(programs) == 8


def test_rows_of_an_output_gc_removed_are_computed_again(tmp_path):
    from bonforge.storage.gc import collect

    store = StageStore(tmp_path)
    with ScriptedServer() as server:
        sampled(store, "pa", problems(4), teacher(server.url))
        assert len(collect(store, keep_runs=0)["outputs"]) == 2  # no run keeps them: problems and candidates
        man = sampled(store, "pb", problems(5), teacher(server.url))
        assert server.count == 32 + 40 and man["rows_reused"] == 0


def test_a_math_timeout_is_judged_again(tmp_path, monkeypatch):
    """A verifier killed at its wall-clock limit says more about the machine than the answer: not reused."""
    from bonforge.judging import math as verify_math

    store = StageStore(tmp_path)
    texts = [lambda pid, j: "\\boxed{1}"]
    recipe = Recipe.model_validate(RECIPE)
    real = verify_math.verify_math

    def busy(candidates, problems, cfg):
        out = real(candidates, problems, cfg)
        return out.set_column(out.schema.get_field_index("status"), out.schema.field("status"),
                              pa.array(["timeout"] * out.num_rows))

    monkeypatch.setattr(verify_math, "verify_math", busy)
    first = verdicts(store, "a", problems(2), candidates_of(problems(2), texts), recipe)
    monkeypatch.setattr(verify_math, "verify_math", real)
    again = verdicts(store, "b", problems(2), candidates_of(problems(2), texts), recipe)
    assert first["rows_computed"] == 2 and (again["rows_computed"], again["rows_reused"]) == (2, 0)
    assert set(store.read("verdicts", again["key"]).column("status").to_pylist()) == {"wrong_answer"}


def _fake_code_judge(monkeypatch, status: str) -> list[int]:
    """Code verdicts of ``status`` for every candidate, without a sandbox; returns the candidates judged per call."""
    from bonforge.judging import code as verify_code
    from bonforge.schema import VERDICTS

    judged: list[int] = []

    def fake(problems, candidates, cfg, pool=None):
        judged.append(candidates.num_rows)
        n = candidates.num_rows
        return pa.table({"candidate_id": candidates.column("candidate_id"),
                         "problem_id": candidates.column("problem_id"), "teacher": candidates.column("teacher"),
                         "extracted": pa.nulls(n, pa.string()),
                         "correct": [status == "passed"] * n, "reward": [float(status == "passed")] * n,
                         "status": [status] * n, "tests_passed": [int(status == "passed")] * n, "tests_total": [1] * n,
                         "detail": pa.nulls(n, pa.string()), "latency_ms": [1.0] * n}, schema=VERDICTS)

    monkeypatch.setattr(verify_code, "verify_code", fake)
    return judged


def _code_problems(count: int) -> pa.Table:
    return problems(count, domain="code", tests=lambda i: json.dumps({"kind": "stdio", "tests": [
        {"input": "", "output": str(i)}]}))


@pytest.mark.parametrize("status", ["timeout", "infra_error", "sandbox_error"])
def test_a_code_timeout_or_a_verdict_without_a_label_is_judged_again(tmp_path, monkeypatch, status):
    """A code test's limit is partly wall-clock time: a code timeout is not reused, like a maths one; nor is a
    verdict without a label (schema.NO_LABEL: the machine or the sandbox failed); a verdict of another status
    is."""
    store = StageStore(tmp_path)
    table = _code_problems(2)
    cands = candidates_of(table, [lambda pid, j: "```python\nprint(1)\n```"])
    recipe = Recipe.model_validate({**RECIPE, "verify": {"code": {"backend": "process", "pool_size": 1}}})
    judged = _fake_code_judge(monkeypatch, status)
    first = verdicts(store, "a", table, cands, recipe, "code")
    judged = _fake_code_judge(monkeypatch, "passed")
    again = verdicts(store, "b", table, cands, recipe, "code")
    assert first["rows_computed"] == 2 and (again["rows_computed"], again["rows_reused"]) == (2, 0) and judged == [2]
    assert set(store.read("verdicts", again["key"]).column("status").to_pylist()) == {"passed"}
    judged = _fake_code_judge(monkeypatch, "wrong_answer")
    third = verdicts(store, "c", table, cands, recipe, "code")
    assert (third["rows_computed"], third["rows_reused"]) == (0, 2) and judged == []


def test_code_verdicts_are_not_reused_across_backends(tmp_path, monkeypatch):
    """The backend decides which Python runs a program (the host's or the image's): a verdict under one is
    not served under the other, and each backend's own verdicts are reused."""
    store = StageStore(tmp_path)
    table = _code_problems(2)
    cands = candidates_of(table, [lambda pid, j: "```python\nprint(1)\n```"])

    def recipe(backend: str) -> Recipe:
        return Recipe.model_validate({**RECIPE, "verify": {"code": {"backend": backend, "pool_size": 1}}})

    judged = _fake_code_judge(monkeypatch, "passed")
    verdicts(store, "a", table, cands, recipe("process"), "code")
    in_docker = verdicts(store, "b", table, cands, recipe("docker"), "code")
    assert (in_docker["rows_computed"], in_docker["rows_reused"]) == (2, 0) and judged == [2, 2]
    back = verdicts(store, "c", table, cands, recipe("process"), "code")
    assert (back["rows_computed"], back["rows_reused"]) == (0, 2) and judged == [2, 2]
