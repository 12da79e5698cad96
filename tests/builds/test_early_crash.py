"""Crash consistency of early stopping without rounds (``filter.early_stop`` with ``engine.streaming``), whose
stream writes what it draws as it comes (``bonforge.flows.early.Journal``): builds killed with SIGKILL at random
moments all through (before sampling, while the stream draws, inside the rounds' stages, in the stages after
them and the export), each rerun to completion: the same dataset bytes as a build never killed, a consistent
store, no journal left, and the requests asked again exactly those the journal did not hold, at most what was in
flight at the kill. Two builds drawing into one store at once never lose each other's journal."""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from crash_build import Forks, build, contents
from llm_server import ScriptedServer
from procs import kill_group
from test_early_stop import PROBLEMS, env, exact, script, write
from test_reuse_crash import assert_consistent

pytestmark = pytest.mark.slow
WINDOW, SHARD, N = 2, 1, 4  # each teacher's requests in flight at once, problems per journal file, samples each
LOST = 2 * (WINDOW + SHARD * N)  # per teacher: its requests in flight and a shard's samples not yet written


def journal(store: Path) -> list[Path]:
    return sorted((store / "stages" / "rounds").glob("*/drawn-*.parquet"))


def held(store: Path, stages: bool = True) -> set[str]:
    """The samples the store holds (their candidate ids): in the journal's files, and (``stages``) in every written
    file of a candidates stage (committed or not: a shard the rounds' stages wrote)."""
    files = journal(store) + [f for f in (store / "stages" / "candidates").glob("*/*.parquet") if stages
                              and "candidate_id" in pq.read_schema(f).names]
    return {c for f in files for c in pq.read_table(f, columns=["candidate_id"]).column("candidate_id").to_pylist()}


PHASES = ("before sampling", "drawing", "rounds' stages", "after the rounds")


def phase(store: Path, asked: int, want: int) -> str:
    """Where a build is, from the requests it asked and its journal (forgotten once the final candidates commit:
    then verification, the stats and the export run)."""
    if asked == 0:
        return PHASES[0]
    if asked < want:
        return PHASES[1]
    return PHASES[2] if journal(store) else PHASES[3]


def watch(child, store: Path, server: ScriptedServer, want: int, stop=lambda where, since, asked: False) -> dict:
    """When each phase of the build of ``child`` began (seconds from now) and, ``end``, when it ended; once
    ``stop(phase, seconds in it, requests asked)`` says so, the build is killed instead (no ``end``)."""
    t0, start, began = time.perf_counter(), server.count, {}
    while child.poll() is None:
        asked = server.count - start
        where, now = phase(store, asked, want), time.perf_counter() - t0
        began.setdefault(where, now)
        if stop(where, now - began[where], asked):
            kill_group(child)
            return began
        time.sleep(0.01)
    return {**began, "end": time.perf_counter() - t0}


def moment(aim: str, share: float, want: int, length: dict):
    """A kill's ``stop`` for ``watch``: ``share`` of the way through phase ``aim`` (of its ``length`` in seconds, or
    of the ``want`` requests while drawing), or at once in a later phase."""

    def stop(where: str, since: float, asked: int) -> bool:
        if where != aim:
            return PHASES.index(where) > PHASES.index(aim)
        return asked >= max(1, share * want) if aim == PHASES[1] else since >= share * length[aim]

    return stop


def test_sigkill_at_random_moments_redoes_at_most_what_was_in_flight(tmp_path):
    """Kill i aims at phase i mod 4, at a random moment of it (seeded): a random share of the phase's length in
    the build never killed, or while drawing a random share of the requests; a kill that comes late lands in a
    later phase and counts there. Each killed build asks a server of its own (``first``), its rerun and the
    build never killed another (``then``): what each asked is counted apart, a request of the killed build that
    arrives late included."""
    rng = random.Random(int(os.environ.get("BONFORGE_CRASH_SEED", "11")))
    want = exact([f"q{i:03d}" for i in range(1, PROBLEMS + 1)], N)
    with ScriptedServer(script, delay_s=0.1) as first, ScriptedServer(script, delay_s=0.1) as then, \
            Forks(env(), tmp_path / "logs") as forks:
        recipe = write(tmp_path, then.url, n=N, window=WINDOW, shard=SHARD)
        child = forks.start([str(tmp_path / "reference"), str(recipe)])
        began = watch(child, tmp_path / "reference", then, want)
        assert child.wait() == 0 and then.count == want and list(began) == [*PHASES, "end"], began
        reference = contents(tmp_path / "reference", json.loads(child.log.read_text().strip().splitlines()[-1]))
        length = {p: began[q] - began[p] for p, q in zip(began, list(began)[1:])}
        kills, hit, tries = 0, dict.fromkeys(PHASES, 0), 0
        while kills < 24 and tries < 60:
            tries += 1
            store, aim, share = tmp_path / f"store-{tries}", PHASES[kills % 4], rng.random()
            asked, again = first.count, then.count
            child = forks.start([str(store), str(recipe), *served_by(first)])
            if "end" in watch(child, store, first, want, moment(aim, share, want, length)):
                continue  # it ended first (a lighter load): another try
            kills += 1
            where = phase(store, first.count - asked, want)
            hit[where] += 1
            assert_consistent(store)
            kept = held(store)
            rerun = forks.run([str(store), str(recipe)])
            asked, again = first.count - asked, then.count - again
            assert again == want - len(kept), (where, asked, len(kept), again)  # nothing held is asked again
            assert 0 <= asked - len(kept) <= LOST, (where, asked, len(kept))
            assert contents(store, rerun) == reference, where
            assert_consistent(store)
            assert journal(store) == [], where
    assert kills >= 24, f"only {kills} of {tries} builds were still running when killed"
    assert min(hit.values()) >= 3, hit


class Gated(ScriptedServer):
    """The script's answers, each past the first ``limit`` held until ``let`` lets more through."""

    def __init__(self, limit: int):
        super().__init__(self.step, delay_s=0.05)
        self.limit, self.gate = limit, threading.Condition()

    def step(self, n: int, body: dict):
        with self.gate:
            self.gate.wait_for(lambda: n < self.limit, timeout=300)
        return script(n, body)

    def let(self, more: int) -> None:
        with self.gate:
            self.limit += more
            self.gate.notify_all()


def written(store: Path) -> dict[str, str]:
    """Each journal file's sha256, by name."""
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in journal(store)}


def held_back(server: Gated, child, store: Path) -> dict[str, str]:
    """Once the build of ``child`` waits on ``server``'s gate (every request it may send is held) and its journal
    is written (no change for a second): ``written``."""
    deadline = time.monotonic() + 120
    while server.in_flight < 2 * WINDOW or server.count < server.limit:
        assert child.poll() is None and time.monotonic() < deadline, "the build did not reach the gate"
        time.sleep(0.02)
    seen: dict[str, str] = {}
    while (now := written(store)) != seen:
        seen = now
        time.sleep(1.0)
    return seen


def served_by(server: ScriptedServer) -> list[str]:
    return ["--set", f"teachers.a.base_url={server.url}", "--set", f"teachers.b.base_url={server.url}"]


def test_two_builds_of_one_recipe_at_once_keep_each_others_journal(tmp_path):
    """Builds A and B of one recipe into one store at once, each through a server of its own whose gate holds its
    answers: B began with A's journal files in the folder and numbered its own after them, so that A's next file
    had the name of B's first and overwrote it. Now no file either wrote changes or goes while both draw; both end
    with the dataset of a build alone, and no journal is left."""
    with ScriptedServer(script) as alone, Gated(16) as a, Gated(16) as b, Forks(env(), tmp_path / "logs") as forks:
        recipe = write(tmp_path, alone.url, n=N, window=WINDOW, shard=SHARD)
        reference = contents(tmp_path / "alone", build(tmp_path / "alone", recipe))
        store = tmp_path / "store"
        first = forks.start([str(store), str(recipe), *served_by(a)])
        before = held_back(a, first, store)
        second = forks.start([str(store), str(recipe), *served_by(b)])
        before |= held_back(b, second, store)
        a.let(24)  # A draws on: more files of its own beside B's
        now = held_back(a, first, store)
        assert len(now) > len(before) and {n: now.get(n) for n in before} == before
        b.let(10_000)
        assert second.wait(300) == 0, Path(f"{second.log}.err").read_text()[-3000:]
        a.let(10_000)
        assert first.wait(300) == 0, Path(f"{first.log}.err").read_text()[-3000:]
    for child in (first, second):
        record = json.loads(child.log.read_text().strip().splitlines()[-1])
        assert contents(store, record) == reference
    assert journal(store) == []
    assert_consistent(store)


def test_a_build_of_other_teacher_settings_finishing_leaves_the_journal_of_one_still_drawing(tmp_path):
    """Build A draws (held at its server's gate) while build B, of teachers of other settings (a temperature: the
    rounds' key, and so the journal's folder, are A's), runs to its end: B removed every journal file, A's too,
    and A killed then asked its rerun for every sample it had drawn. Now A's files stay (no committed candidates
    hold their samples) and its rerun asks only for what was in flight; the same dataset as A alone."""
    hotter = ["--set", "teachers.a.temperature=0.5", "--set", "teachers.b.temperature=0.5"]
    with ScriptedServer(script) as alone, Gated(24) as a, Forks(env(), tmp_path / "logs") as forks:
        recipe = write(tmp_path, alone.url, n=N, window=WINDOW, shard=SHARD)
        reference = contents(tmp_path / "alone", build(tmp_path / "alone", recipe))
        want = alone.count
        store = tmp_path / "store"
        child = forks.start([str(store), str(recipe), *served_by(a)])
        before = held_back(a, child, store)
        forks.run([str(store), str(recipe), *hotter])
        assert written(store) == before
        kill_group(child)
        kept = held(store, stages=False)  # A's samples: its journal (B's candidates share their ids)
        before = alone.count
        rerun = forks.run([str(store), str(recipe)])
        assert alone.count - before == want - len(kept)
        assert 0 <= a.count - len(kept) <= LOST
        assert contents(store, rerun) == reference
    assert journal(store) == []
    assert_consistent(store)
