"""Exact early stopping (``filter.early_stop``) against a scripted OpenAI-compatible server whose problems have
known pass rates: the same dataset content as a build that draws every sample, exactly the completions that
drawing one sample at a time in the interleaved order would ask, a build killed inside a round resumes to the
same dataset, and later builds (early stop off, a larger n) draw only what no output holds; all of it in rounds
and without (``engine.streaming``), where a problem still open asks for its next samples while the others'
are still being drawn."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest
from crash_build import Forks, build, contents
from llm_server import ScriptedServer, answer
from procs import kill_group

from bonforge.llm.base import problem_seed
from bonforge.storage.store import StageStore

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROBLEMS = 12
pytestmark = pytest.mark.slow  # several whole builds


RIGHT_OF_8 = (8, 8, 7, 6, 0, 2, 8, 5, 8, 3, 1, 8)  # problem i: right for this many of every 8 seeds in a row


def right(question: str, seed: int) -> bool:
    """The script: problem ``i`` ("What is i + 2i?") is answered right for ``RIGHT_OF_8[i - 1]`` of every 8
    consecutive seeds."""
    i = int(re.search(r"What is (\d+) \+", question).group(1))
    return seed % 8 < RIGHT_OF_8[i - 1]


def script(n: int, body: dict):
    a, b = map(int, re.search(r"What is (\d+) \+ (\d+)\?", body["messages"][0]["content"]).groups())
    reply = answer(body)
    value = a + b if right(body["messages"][0]["content"], body["seed"]) else a + b + 1
    reply["choices"][0]["message"]["content"] = f"{body['model']} says \\boxed{{{value}}} (seed {body['seed']})."
    return 200, {}, reply


def write(folder: Path, url: str, n: int = 4, early: bool = True, window: int = 32, shard: int = 5) -> Path:
    rows = [{"id": f"q{i:03d}", "question": f"What is {i} + {2 * i}?", "answer": str(3 * i)}
            for i in range(1, PROBLEMS + 1)]
    (folder / "problems.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = folder / "recipe.yaml"
    teacher = (f'engine: openai, base_url: "{url}", api_key_env: null, max_tokens: 32, shard_problems: {shard}, '
               f'max_concurrency: {window}, start_concurrency: {min(window, 8)}')  # no slow start: a slow answer
    # at a window of 1 would hold every other request back (the streaming tests measure what the stream holds)
    path.write_text(f"""
name: early
problems: {{name: toy, source: {{path: problems.jsonl}}, fields: {{id: id}}}}
teachers:
  - {{name: a, model: ma, n: {n}, {teacher}}}
  - {{name: b, model: mb, n: {n}, {teacher}}}
filter: {{max_pass_rate: 0.5, early_stop: {str(early).lower()}}}
export: {{name: toy-genselect, rl: {{name: toy-rl}}}}
""")
    return path



def exact(problem_ids: list[str], n: int, max_pass_rate: float = 0.5) -> int:
    """The completions drawing one sample at a time asks: teachers a and b in turn (equal n: a0 b0 a1 b1 ...),
    a problem stopped once more than ``max_pass_rate`` of all its 2n samples are right."""
    total = 0
    for pid in problem_ids:
        i = int(pid.rsplit("q", 1)[1])
        question = f"What is {i} + {2 * i}?"
        seed = problem_seed(0, pid)  # both teachers: seed 0, so sample k of each has seed + k
        ok = 0
        for k in range(2 * n):
            ok += right(question, seed + k // 2)
            if ok / (2 * n) > max_pass_rate:
                total += k + 1
                break
        else:
            total += 2 * n
    return total


def problem_ids(store: Path, record: dict) -> list[str]:
    (key,) = record["stages"]["problems"]
    return StageStore(store).read("problems", key, ["problem_id"]).column("problem_id").to_pylist()


@pytest.mark.parametrize("streaming", [False, True], ids=["rounds", "no-rounds"])
def test_early_stop_is_exact_and_draws_exactly_what_decides(tmp_path, streaming):
    with ScriptedServer(script) as server:
        recipe = write(tmp_path, server.url, window=3)
        mode = f"engine.streaming={str(streaming).lower()}"
        full = build(tmp_path / "full", recipe, "filter.early_stop=false")
        assert server.count == PROBLEMS * 8
        ids = problem_ids(tmp_path / "full", full)
        want = exact(ids, 4)
        assert want <= PROBLEMS * 8 - 12  # some problems stop early (a real saving)

        early = build(tmp_path / "early", recipe, mode)
        assert server.count - PROBLEMS * 8 == want
        assert contents(tmp_path / "early", early) == contents(tmp_path / "full", full)
        assert len(early["stages"]["rounds"]) >= 2
        # the run's tables (catalog views) are the final candidates and verdicts, one per teacher; the rounds'
        # own outputs show in the timings and rows only
        assert len(early["stages"]["candidates"]) == len(early["stages"]["verdicts"]) == 2
        assert any(label.startswith("candidates[b]@round") for label in early["rows"])
        assert sum(r["computed"] for label, r in early["rows"].items() if label.startswith("candidates")) == want

        store = StageStore(tmp_path / "early")
        (stats_key,) = early["stages"]["problem_stats"]
        stats = store.read("problem_stats", stats_key).to_pylist()
        overall = {r["problem_id"]: r for r in stats if r["teacher"] == "*"}
        stopped = {p for p, r in overall.items() if r["stopped_early"]}
        assert stopped and all(overall[p]["drop_reason"] == "too_easy" and overall[p]["n"] < 8 for p in stopped)
        assert all(r["n_planned"] == 8 for r in overall.values())
        assert sum(r["n"] for r in overall.values()) == want
        (full_stats,) = full["stages"]["problem_stats"]
        reference = {r["problem_id"]: r for r in StageStore(tmp_path / "full").read("problem_stats", full_stats)
                     .to_pylist() if r["teacher"] == "*"}
        assert {p for p, r in overall.items() if r["keep"]} == {p for p, r in reference.items() if r["keep"]}
        assert all(reference[p]["drop_reason"] == "too_easy" for p in stopped)

        before = server.count  # a rebuild asks nothing
        rebuilt = build(tmp_path / "early", recipe, mode)
        assert contents(tmp_path / "early", rebuilt) == contents(tmp_path / "full", full)
        assert server.count == before

        before = server.count  # the same store without early stop: only the samples never drawn
        again = build(tmp_path / "early", recipe, "filter.early_stop=false")
        assert server.count - before == PROBLEMS * 8 - want
        assert contents(tmp_path / "early", again) == contents(tmp_path / "full", full)

        before = server.count  # a larger n with early stop: only the samples that decide and no output holds
        grown = build(tmp_path / "early", recipe, "filter.early_stop=true", mode, "teachers.a.n=6", "teachers.b.n=6")
        held = 8  # every problem holds samples 0..3 of each teacher: the first 8 of the interleaved order
        assert server.count - before == exact(ids, 6) - sum(min(held, k) for k in _stops(ids, 6))
        bigger = build(tmp_path / "bigger", recipe, "filter.early_stop=false", "teachers.a.n=6", "teachers.b.n=6")
        assert contents(tmp_path / "early", grown) == contents(tmp_path / "bigger", bigger)
        assert server.max_in_flight <= 2 * 3  # each teacher's window (max_concurrency 3) holds without rounds too


@pytest.mark.parametrize("streaming", [True, False], ids=["no-rounds", "rounds"])
def test_a_slow_problem_holds_no_other_back(tmp_path, streaming):
    """Problem q001's answers wait until another problem asks for its next samples (q005, with none right, asks
    for all the rest after its first five): without rounds it does, while q001's samples are still out; in rounds
    (the control) it cannot, until q001's round is in (its answers then come after a wait of WAIT_S)."""
    other_asked, first = threading.Event(), 5  # the first five samples of the interleaved order: a0 b0 a1 b1 a2
    asked: dict[str, int] = {}
    woken: list[bool] = []  # per answer of q001: whether another problem asked for more while it waited
    lock = threading.Lock()

    def slow(n: int, body: dict):
        pid = "q%03d" % int(re.search(r"What is (\d+) \+", body["messages"][0]["content"]).group(1))
        with lock:
            asked[pid] = asked.get(pid, 0) + 1
            if pid != "q001" and asked[pid] > first:
                other_asked.set()
        if pid == "q001":
            woken.append(other_asked.wait(WAIT_S))
        return script(n, body)

    with ScriptedServer(slow) as server:
        recipe = write(tmp_path, server.url)
        record = build(tmp_path / "store", recipe, f"engine.streaming={str(streaming).lower()}")
        assert server.count == exact(problem_ids(tmp_path / "store", record), 4)
    assert asked["q005"] == 8 and asked["q001"] == first  # q005 drew all, q001 (all right) stopped after five
    assert woken == [streaming] * first


WAIT_S = 30.0  # what q001's answers wait for at most (the control, in rounds, waits this long once; loaded machines)


def _stops(ids: list[str], n: int) -> list[int]:
    """Each problem's samples drawn by one-at-a-time early stopping (``exact`` per problem)."""
    return [exact([pid], n) for pid in ids]


def env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE), str(REPO / "tests" / "helpers")])}


def test_a_build_killed_inside_a_round_resumes_to_the_same_dataset(tmp_path):
    with ScriptedServer(script, delay_s=0.1) as server, Forks(env(), tmp_path / "logs") as forks:
        recipe = write(tmp_path, server.url)
        reference = forks.run([str(tmp_path / "reference"), str(recipe)])
        asked = server.count
        store = tmp_path / "store"
        child = forks.start([str(store), str(recipe)])
        # inside a round after the first: its sampling stage has a shard plan and no manifest yet
        deadline = time.monotonic() + 120
        while child.poll() is None and time.monotonic() < deadline and not _inside_later_round(store):
            time.sleep(0.01)
        assert child.poll() is None, "the build finished before it could be killed inside a round"
        kill_group(child)
        resumed = forks.run([str(store), str(recipe)])
        assert contents(store, resumed) == contents(tmp_path / "reference", reference)
        # the killed build had drawn every sample (its stream draws them all before the rounds' stages write them)
        # and written them as they came: the rerun asked for none
        assert server.count - asked == asked


def test_a_build_killed_while_it_draws_asks_again_only_for_what_was_in_flight(tmp_path):
    """Early stopping's stream writes what it draws as it comes (``early.Journal``, a shard's rows at a time: here
    one problem's 4 samples): a build killed halfway through its draws asks its rerun for the requests that were
    in flight and the samples not yet written (fewer than a shard per teacher), not for every sample drawn; the
    rerun's dataset is the reference's, and a finished build leaves no journal behind."""
    window = 2
    with ScriptedServer(script, delay_s=0.1) as server, Forks(env(), tmp_path / "logs") as forks:
        recipe = write(tmp_path, server.url, window=window, shard=1)
        reference = forks.run([str(tmp_path / "reference"), str(recipe)])
        want = server.count  # what a build draws (exactly the rule's minimum)
        store = tmp_path / "store"
        child = forks.start([str(store), str(recipe)])
        deadline = time.monotonic() + 120
        while child.poll() is None and time.monotonic() < deadline and server.count - want < want // 2:
            time.sleep(0.005)
        kill_group(child)
        asked = server.count - want
        assert want // 2 <= asked < want, f"killed after {asked} of {want} requests: not halfway through its draws"
        resumed = forks.run([str(store), str(recipe)])
        again = server.count - want - asked
        assert contents(store, resumed) == contents(tmp_path / "reference", reference)
        redone = asked + again - want
        assert 0 <= redone <= 2 * window + 2 * 3, (asked, again, want)  # in flight; unwritten: < 4 per teacher
    assert not list((store / "stages" / "rounds").glob("*/drawn-*"))


def _inside_later_round(store: Path) -> bool:
    rounds = [d for d in (store / "stages" / "rounds").glob("*") if (d / "manifest.json").is_file()]
    flying = [d for d in (store / "stages" / "candidates").glob("*") if (d / "plan.json").is_file()
              and not (d / "manifest.json").is_file()]
    return len(rounds) >= 2 and bool(flying)


def test_the_round_tables_say_what_each_round_drew(tmp_path):
    with ScriptedServer(script) as server:
        recipe = write(tmp_path, server.url)
        record = build(tmp_path / "store", recipe)
    store = StageStore(tmp_path / "store")
    tables = sorted((store.read("rounds", k) for k in record["stages"]["rounds"]),
                    key=lambda t: t.column("round")[0].as_py())
    assert tables[0].column("drawn").to_pylist() == [0] * PROBLEMS * 2
    last = tables[-1]
    assert last.column("draws").to_pylist() == last.column("drawn").to_pylist()  # the last round draws nothing
    assert sum(last.column("drawn").to_pylist()) == server.count


@pytest.mark.parametrize("streaming", [False, True], ids=["rounds", "no-rounds"])
def test_bonforge_run_draws_in_rounds_and_a_rebuild_asks_nothing(tmp_path, shared_prefect, streaming):
    """The same through `bonforge run` (a Prefect task per node, the rounds' nodes among them; without rounds, the
    streaming build's nodes); a second run finds every round committed and walks the store alone."""
    from typer.testing import CliRunner

    from bonforge.cli import app

    with ScriptedServer(script) as server:
        recipe = write(tmp_path, server.url)
        for _ in range(2):
            result = CliRunner().invoke(app, ["run", str(recipe), "--store", str(tmp_path / "store"), "--set",
                                              f"engine.streaming={str(streaming).lower()}"])
            assert result.exit_code == 0, result.output
        ids = StageStore(tmp_path / "store").read("problems", StageStore(tmp_path / "store").run()["stages"]
                                                  ["problems"][0], ["problem_id"]).column("problem_id").to_pylist()
        assert server.count == exact(ids, 4)
    reports = list((tmp_path / "store" / "reports").glob("*/report.html"))
    assert reports and all("problems stopped early left out" in r.read_text() for r in reports)


def hot(n: int, body: dict):
    """``script``, each text naming the temperature it was drawn at."""
    status, headers, reply = script(n, body)
    reply["choices"][0]["message"]["content"] += f" T={body['temperature']}"
    return status, headers, reply


def test_a_rerun_takes_from_the_journal_only_its_own_settings_samples(tmp_path):
    """Two builds of one recipe but the temperature (one rounds key: its journal folder) killed while they draw
    leave journal files holding the same candidate ids; the rerun of the second took the first's text for some of
    its samples (whichever file's name sorted first): another temperature's sample in its dataset. Now its
    dataset is the reference's, every text drawn at its own temperature."""
    window = 2
    with ScriptedServer(hot, delay_s=0.1) as server, Forks(env(), tmp_path / "logs") as forks:
        cold = write(tmp_path, server.url, window=window, shard=1)
        warm = cold.with_name("warm.yaml")
        warm.write_text(cold.read_text().replace("max_tokens: 32", "temperature: 0.9, max_tokens: 32"))
        reference = forks.run([str(tmp_path / "reference"), str(warm)])
        want = server.count
        store = tmp_path / "store"
        for recipe in (cold, warm):
            start = server.count
            child = forks.start([str(store), str(recipe)])
            deadline = time.monotonic() + 120
            while child.poll() is None and time.monotonic() < deadline and server.count - start < want // 2:
                time.sleep(0.005)
            kill_group(child)
        (folder,) = {p.parent for p in (store / "stages" / "rounds").glob("*/drawn-*")}
        assert len({p.name.split("-")[2] for p in folder.glob("drawn-*")}) == 2  # both builds' journals, one folder
        resumed = forks.run([str(store), str(warm)])
    assert contents(store, resumed) == contents(tmp_path / "reference", reference)
    texts = StageStore(store).read("candidates", resumed["stages"]["candidates"][0], ["text"]).column("text")
    assert all(t.endswith(" T=0.9") for t in texts.to_pylist())
