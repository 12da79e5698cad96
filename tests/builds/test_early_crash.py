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
from test_early_stop import env, script, write
from test_reuse_crash import assert_consistent, pause

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


def phase(store: Path, asked: int, want: int) -> str:
    if asked == 0:
        return "before sampling"
    if asked < want:
        return "drawing"
    return "rounds' stages" if journal(store) else "after the rounds"  # forgotten once the final candidates commit


def test_sigkill_at_random_moments_redoes_at_most_what_was_in_flight(tmp_path):
    """Each killed build asks a server of its own (``first``), its rerun and the build never killed another
    (``then``): what each asked is counted apart, a request of the killed build that arrives late included."""
    rng = random.Random(int(os.environ.get("BONFORGE_CRASH_SEED", "11")))
    with ScriptedServer(script, delay_s=0.1) as first, ScriptedServer(script, delay_s=0.1) as then, \
            Forks(env(), tmp_path / "logs") as forks:
        recipe = write(tmp_path, then.url, n=N, window=WINDOW, shard=SHARD)
        t0 = time.perf_counter()
        reference = contents(tmp_path / "reference", forks.run([str(tmp_path / "reference"), str(recipe)]))
        span, want = time.perf_counter() - t0, then.count
        kills, hit, tries, slots = 0, {}, 0, 24
        while kills < slots and tries < 3 * slots:
            tries += 1
            store = tmp_path / f"store-{tries}"
            # each kill in a slot of its own of the build's span (seeded): spread over the whole build
            wait = span * (kills + rng.random()) / slots
            asked, again = first.count, then.count
            child = forks.start([str(store), str(recipe), *served_by(first)])
            pause(child, wait)
            if child.poll() is not None:  # it finished first (a lighter load): later kills come earlier
                span = wait
                continue
            kill_group(child)
            kills += 1
            where = phase(store, first.count - asked, want)
            hit[where] = hit.get(where, 0) + 1
            assert_consistent(store)
            kept = held(store)
            rerun = forks.run([str(store), str(recipe)])
            asked, again = first.count - asked, then.count - again
            assert again == want - len(kept), (where, asked, len(kept), again)  # nothing held is asked again
            assert 0 <= asked - len(kept) <= LOST, (where, asked, len(kept))
            assert contents(store, rerun) == reference, where
            assert_consistent(store)
            assert journal(store) == [], where
    assert kills >= 20, f"only {kills} of {tries} builds were still running when killed"
    assert set(hit) == {"before sampling", "drawing", "rounds' stages", "after the rounds"}, hit
    assert hit["drawing"] >= 3, hit


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
