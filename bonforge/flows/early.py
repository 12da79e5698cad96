"""Early stopping without rounds (``filter.early_stop`` with ``engine.streaming``): a problem still open after its
verdicts asks for its next samples at once, so the engines' batches stay full (``bonforge.llm.stream``) while
the verdicts of the others are judged here, beside them.

Each problem follows the rule of the rounds on its own (``bonforge.stages.rounds.decide``, its own round count):
it draws the same samples, in the same index order with the same seeds, as it does in the rounds, whatever
the timing. ``draw`` returns every sample drawn so, and the verdicts judged; the rounds' stages then run over
them (``bonforge.flows.rounds``): ``Prefetched`` gives each round's sampling stage the samples already drawn and
``verify.Judged`` each verdicts stage the verdicts already judged, so the stages, their keys, tables and bytes
are those of the rounds, and neither an engine nor the judge is asked twice.

At most ``OPEN`` problems are open at once (problems start in their order as others close). What is drawn is
written as it comes, a sampling shard's rows at a time (``Journal``), so a build killed meanwhile asks again only
for what was in flight; what is judged is held in memory until the rounds' verdicts stages write it (and travels
with each verification task): a build killed meanwhile judges it again."""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
import uuid
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc

from bonforge.config import Recipe
from bonforge.engine import reuse
from bonforge.llm.base import Completion, Request, Unfinished, consecutive, problem_seed
from bonforge.llm.stream import open_stream
from bonforge.schema import NO_LABEL
from bonforge.stage import Ref
from bonforge.stages import rounds, sample, verify
from bonforge.storage.store import StageStore

log = logging.getLogger("bonforge")

OPEN = 1024  # problems open at once


@dataclass
class Problem:
    """One problem's state: per teacher, its cap (``n``, or the samples held when the engine skipped its prompt)
    and the label of each sample drawn (True, False, None: no label yet)."""

    caps: list[int]
    labels: list[list] = field(default_factory=list)
    round_: int = 1
    flying: int = 0  # requests asked and not answered
    fresh: list = field(default_factory=list)  # (teacher position, first index, samples) answered, not judged

    def counts(self) -> tuple[list[int], list[int]]:
        """Per teacher the samples drawn and those right (one without a label is not right: ``rounds``)."""
        return [len(ls) for ls in self.labels], [sum(v is True for v in ls) for ls in self.labels]


@dataclass
class Drawn:
    """What ``draw`` drew: per teacher name, each problem's completions by sample index; the problems whose
    prompt a teacher's engine skipped; the verdicts it judged; the engine time (first request to last answer)
    and completion tokens."""

    samples: dict[str, dict[tuple[str, int], Completion]]
    skipped: dict[str, set[str]]
    judged: verify.Judged  # lent to the rounds' verdicts stages
    engine_s: float = 0.0
    tokens: int = 0
    failed: Unfinished | None = None  # the first sample that failed alone: drawing stopped there
    sent: dict[str, dict[str, tuple]] = field(default_factory=dict)  # per teacher the messages of each problem


class Journal:
    """The samples the streams drew, written as they come beside the first round's table (``plan``: its ref), in
    files ``drawn-<teacher>-<writer>-<n>.parquet`` of a sampling shard's rows (``shard_problems`` x ``n``) each,
    with their piece of the row index as a stage's shard has (``bonforge.engine.reuse``): a rerun after a kill
    finds them (``stored``) and asks the engines for what was in flight only. ``writer`` is this journal's own
    (random): two builds that draw into one folder at once (the same recipe, or teachers of other settings: the
    rounds' key names teachers and ``n`` only) never write one file. A file goes (``forget``) once committed
    candidates hold all its samples."""

    NAME = re.compile(r"^drawn-.+\.parquet$")

    def __init__(self, store: StageStore, plan: Ref, teachers: list):
        self.store, self.key, self.folder = store, plan.key, store.stage_dir("rounds", plan.key)
        self.teachers = {t.name: t for t in teachers}
        self.held: dict[str, list[Completion]] = {t.name: [] for t in teachers}
        self.lock = threading.Lock()  # the streams' threads add
        self.writer, self.count = uuid.uuid4().hex[:12], 0

    def files(self) -> list:
        return [self._path(name) for name in sorted(self.store.loc.names(self.folder)) if self.NAME.match(name)]

    def _path(self, name: str):
        return self.store.loc.path("stages", "rounds", self.key, name)

    def pin(self, problems: pa.Table, ids: dict[str, pa.Table]) -> None:
        """The identity of every sample the drawing may write: per teacher, ``ids`` (``identities``) of the
        ``problems`` it draws from, computed as its prompts were rendered (a prompt template edited while it draws
        moves no sample written to another prompt's identity). Kept: their ``row_id`` only."""
        self.ids = {name: t.column("row_id").combine_chunks() for name, t in ids.items()}
        self.at = {pid: k for k, pid in enumerate(problems.column("problem_id").to_pylist())}

    def add(self, teacher, comps: list[Completion]) -> None:
        """Samples of ``teacher`` drawn (``index``: the sample index); written once a shard's rows wait."""
        with self.lock:
            held = self.held[teacher.name]
            held += comps
            if len(held) >= teacher.shard_problems * teacher.n:
                self._write(teacher, held)
                self.held[teacher.name] = []

    def write(self) -> None:
        """Every sample waiting, one file per teacher."""
        with self.lock:
            for name, held in self.held.items():
                if held:
                    self._write(self.teachers[name], held)
                    self.held[name] = []

    def _write(self, teacher, comps: list[Completion]) -> None:
        by_problem: dict[str, list[Completion]] = {}
        for c in comps:  # a sample of no problem drawn has no identity: not written
            if c.request_id in self.at and 0 <= c.index < teacher.n:
                by_problem.setdefault(c.request_id, []).append(c)
        drawn = [(pid, 0, sorted(cs, key=lambda c: c.index)) for pid, cs in sorted(by_problem.items())]
        if not drawn:
            return
        rows = sample.candidates(teacher, drawn)
        at = [self.at[pid] * teacher.n + c.index for pid, _, cs in drawn for c in cs]
        ids = pa.table({"candidate_id": rows.column("candidate_id"), "row_id": self.ids[teacher.name].take(at)})
        notes = reuse.notes(reuse.Part(ids), rows, sample.ROWS)
        name = f"drawn-{teacher.name}-{self.writer}-{self.count:05d}.parquet"
        self.store.loc.write_parquet(rows, self._path(name), notes)
        self.count += 1

    def forget(self, candidates: list[Ref]) -> None:
        """The journal's files whose every sample the committed ``candidates`` (each teacher's final ones) hold:
        this build's, and those of any writer that drew the same samples (a build killed earlier, or one drawing
        beside this one: a rerun of either finds them in ``candidates``); not those of teachers of other
        settings. A file whose footer is no Parquet's, or has no piece of the index, goes too (no reader can use
        it); one that cannot be reached, or that the store refuses to remove, stays. And the temp files of writes a
        kill cut short."""
        held = []
        for c in candidates:
            try:
                held.append(self.store.read_file(self.store.loc.path("stages", "candidates", c.key,
                                                                     c.manifest.row_index), ["row_id"]))
            except reuse.UNREADABLE as e:  # the journal's files stay for a later build
                log.warning("candidates %s: row index unreadable (%s): the journal's files stay", c.key, e)
        held = pa.concat_tables(held).column("row_id") if held else pa.array([], pa.binary())
        for path in self.files():
            try:
                done = bool((reuse.match(reuse.footer_piece(self.store, path).column("row_id"), held) >= 0).all())
            except OSError:  # gone (another build forgot it meanwhile), or out of reach for now
                continue
            except reuse.UNREADABLE:
                done = True
            if done:
                self._tidy(self.store.loc.remove, path)
        self._tidy(self.store.loc.remove_dead_temps, self.folder)

    @staticmethod
    def _tidy(remove, path) -> None:
        """A store that refuses (no right to delete there): what was to go stays; the build goes on."""
        try:
            remove(path)
        except OSError as e:
            log.warning("%s stays: the store refused to remove it (%s)", path, e)


class Tagged:
    """What a teacher's stream puts goes to the shared queue with the teacher's position; its samples (each with
    its sample index) go to the ``journal`` first, as they come."""

    def __init__(self, out: queue.Queue, k: int, teacher, journal: Journal | None):
        self.out, self.k, self.teacher, self.journal = out, k, teacher, journal

    def put(self, item) -> None:
        if not isinstance(item, BaseException):  # (request, its completions or the Unfinished of its samples)
            request, comps = item
            failed = comps if isinstance(comps, Unfinished) else None
            item = (request, _indexed(self.teacher, request, failed.results[0] if failed else comps), failed)
            try:
                if self.journal is not None:
                    self.journal.add(self.teacher, item[1])
            except Exception as e:  # noqa: BLE001 (a full disk: the reader raises it, as a stream's failure)
                item = e
        self.out.put((self.k, item))


def _indexed(teacher, request: Request, comps: list[Completion]) -> list[Completion]:
    """The completions of ``request``, each ``index`` the sample's own (from the request's seed)."""
    start = request.seed - problem_seed(teacher.seed, request.id)
    return [replace(c, index=start + c.index) for c in comps]


class Drawing:
    """``draw`` done once, when a round's sampling stage first asks for samples (``Prefetched``): a build whose
    rounds are committed draws nothing, nor does the walk of the store before a build's flow starts. ``lent``:
    the engines held across the rounds by teacher name (None: one is made for the drawing and closed after it)."""

    def __init__(self, recipe: Recipe, store: StageStore, problems: Ref, lent: dict, domains: set):
        self.recipe, self.store, self.problems, self.lent, self.domains = recipe, store, problems, lent, domains
        self.judged = verify.Judged()  # lent to the rounds' verdicts stages
        self.lock, self.got = threading.Lock(), None
        self.journal: Journal | None = None  # set once the first round's table is committed (``begins``)

    def begins(self, plan: Ref) -> None:
        """The first round's table is ``plan``: the journal of what is drawn goes beside it."""
        self.journal = Journal(self.store, plan, list(self.recipe.teachers))

    def forget(self, candidates: list[Ref]) -> None:
        """Every teacher's final ``candidates`` are committed: the journal's samples are there."""
        if self.journal is not None:
            self.journal.forget(candidates)

    def get(self) -> Drawn:
        with self.lock:
            if self.got is None:
                from bonforge import llm

                engines = {t.name: self.lent[t.name] or llm.make_engine(t) for t in self.recipe.teachers}
                table = self.store.read("problems", self.problems.key, verify.JUDGED["problems"])
                try:
                    self.got = draw(self.recipe, self.store, table, engines, self.domains, self.judged, self.journal)
                finally:
                    for engine in engines.values():
                        engine.close()  # a lent engine stays loaded where it is held
            return self.got


def draw(recipe: Recipe, store: StageStore, problems: pa.Table, engines: dict, domains: set,
         judged: verify.Judged | None = None, journal: Journal | None = None) -> Drawn:
    """Every sample early stopping draws from ``problems`` (``problem_id``, ``domain``, ``question`` and what
    the judge reads), the teachers' ``engines`` by name (a teacher's stream opens at its first request). The
    samples and verdicts ``store`` holds already (and the samples of ``journal``) are taken from there
    (``bonforge.engine.reuse``), as the rounds' stages take them: the engines and the judge are asked only for
    the others; those it judges go to ``judged``, those drawn to ``journal``."""
    teachers, cfg = list(recipe.teachers), recipe.filter
    order = rounds.interleaved(tuple(t.n for t in teachers))
    ids = problems.column("problem_id").to_pylist()
    identity = identities(problems, teachers)  # read with the prompts: the same template
    sent = {t.name: {pid: sample.messages(prompt) for pid, prompt in sample.prompts(problems, t, {})} for t in teachers}
    judge = Judge(recipe, store, problems, domains, teachers)
    out: queue.Queue = queue.Queue()
    drawn_before = journal.files() if journal is not None else []
    if journal is not None:
        journal.pin(problems, identity)
    got = Drawn({t.name: stored(store, t, problems, drawn_before, identity[t.name]) for t in teachers},
                {t.name: set() for t in teachers}, judged or verify.Judged(), sent=sent)
    open_: dict[str, Problem] = {}
    streams: dict[int, object] = {}
    ready: list[str] = []

    def decide(pid: str, p: Problem) -> None:
        drawn, correct = p.counts()
        draws, stopped = rounds.decide(drawn, correct, p.caps, order, cfg, p.round_)
        p.round_ += 1
        asked = [(k, d, n) for k, (d, n) in enumerate(zip(drawn, draws)) if n > d]
        if stopped or not asked:
            del open_[pid]
            return
        for k, d, n in asked:
            t, held = teachers[k], got.samples[teachers[k].name]
            p.fresh += [(k, i, 1) for i in range(d, n) if (pid, i) in held]
            missing = [i for i in range(d, n) if (pid, i) not in held]
            if not missing:
                continue
            if k not in streams:
                streams[k] = open_stream(engines[t.name], Tagged(out, k, t, journal))
            # a request per sample (its seed the sample's, as every engine draws it): each is written as it comes
            streams[k].put([Request(id=pid, messages=sent[t.name][pid], n=1,
                                    temperature=t.temperature, top_p=t.top_p, max_tokens=t.max_tokens,
                                    seed=problem_seed(t.seed, pid) + i, stop=tuple(t.stop)) for i in missing])
            p.flying += len(missing)
        if not p.flying:
            ready.append(pid)

    started = last = time.perf_counter()
    try:
        nxt = 0
        while nxt < len(ids) or open_:
            while got.failed is None and nxt < len(ids) and len(open_) < OPEN:
                open_[ids[nxt]] = Problem([t.n for t in teachers], [[] for _ in teachers])
                decide(ids[nxt], open_[ids[nxt]])
                nxt += 1
            if got.failed is not None and not any(p.flying for p in open_.values()):
                log.warning("early stopping without rounds: %s; drawing stopped with every answer received kept: the "
                            "rounds' sampling stages ask for the rest", got.failed)
                break
            if not ready and open_:
                items = [out.get()]
                while not out.empty():
                    items.append(out.get())
                for k, item in items:
                    last = _answered(k, item, teachers[k], open_, got, ready)
            judging, ready[:] = ([] if got.failed else list(ready)), []
            if judging:
                judge([(pid, open_[pid]) for pid in judging], got)
                for pid in judging:
                    decide(pid, open_[pid])
    finally:
        for stream in streams.values():
            stream.close()
        if journal is not None:  # also when the drawing failed: what it drew is paid for, a rerun asks the rest
            journal.write()
    got.engine_s = last - started
    samples = sum(map(len, got.samples.values()))
    log.info("early stopping without rounds: %d samples held, %d completion tokens drawn in %.1fs (%.0f tokens/s)",
             samples, got.tokens, got.engine_s, got.tokens / got.engine_s if got.engine_s else 0.0)
    return got


def _answered(k: int, item, teacher, open_: dict, got: Drawn, ready: list) -> float:
    """Takes one answer of teacher ``k``'s stream (its completions indexed by ``_indexed``; or raises the stream's
    failure); when it is the last its problem waited for, the problem is ready to be judged. A request whose
    sample failed alone (``failed``) stops the drawing (``got.failed``: the first such failure); it is no skip."""
    if isinstance(item, BaseException):
        raise item
    request, comps, failed = item
    got.failed = got.failed or failed
    p = open_[request.id]
    p.flying -= 1
    start = request.seed - problem_seed(teacher.seed, request.id)
    for c in comps:
        got.samples[teacher.name][(request.id, c.index)] = c
        got.tokens += c.completion_tokens
    if comps:
        p.fresh.append((k, start, len(comps)))
    elif failed is None:  # the engine skipped the prompt: this teacher holds what it has (as in the rounds)
        got.skipped[teacher.name].add(request.id)
        p.caps[k] = len(p.labels[k])
    if p.flying == 0:
        ready.append(request.id)
    return time.perf_counter()


def identities(problems: pa.Table, teachers: list) -> dict[str, pa.Table]:
    """Per teacher name, the identity of each of its ``n`` samples of each of the ``problems`` (``sample.ROWS``),
    by problem then index."""
    return {t.name: sample.ROWS.ids(problems, {}, sample.SampleParams(t)) for t in teachers}


def stored(store: StageStore, teacher, problems: pa.Table, drawn: list = (),
           ids: pa.Table | None = None) -> dict[tuple[str, int], Completion]:
    """The samples of ``teacher`` that some committed candidates output, or the files ``drawn`` (a ``Journal``'s),
    hold, by (problem, index); ``ids``: its ``identities`` of ``problems`` (by default, read now)."""
    ids = identities(problems, [teacher])[teacher.name] if ids is None else ids
    found, content = reuse.find(store, "candidates", sample.ROWS, ids.column("row_id"), list(drawn))
    held = ids.filter(pa.array(found))
    cols = {c: held.column(c).to_pylist() for c in ("problem_id", "sample_index", "seed")}
    cols.update({c: content.column(c).to_pylist() for c in ("text", "reasoning", "finish_reason", "prompt_tokens",
                                                            "completion_tokens")})
    return {(pid, i): Completion(pid, i, text, reasoning, finish, prompt, completion, seed, teacher.engine,
                                 teacher.model)
            for pid, i, seed, text, reasoning, finish, prompt, completion in zip(*cols.values())}


class Judge:
    """The verdicts of the samples a problem drew since it was last judged, and again those of its teachers that
    drew which have no label yet (as the rounds' verification judges them again), by the verdicts stage's own
    judge and settings."""

    def __init__(self, recipe: Recipe, store: StageStore, problems: pa.Table, domains: set, teachers: list):
        code = domains == {"code"}
        self.stage = verify.CODE if code else verify.MATH
        self.params = verify.VerifyParams(recipe.verify.code if code else recipe.verify.math)
        self.store, self.problems, self.teachers = store, problems, teachers

    def __call__(self, ready: list[tuple[str, Problem]], got: Drawn) -> None:
        asked: dict[str, tuple[Problem, int, int]] = {}  # candidate id -> (problem, teacher, sample index)
        parts = []
        for pid, p in ready:
            for k in sorted({k for k, _, _ in p.fresh}):
                fresh = [i for kk, start, n in p.fresh if kk == k for i in range(start, start + n)]
                labels = p.labels[k]
                labels += [None] * (max(fresh) + 1 - len(labels))
                again = [i for i, v in enumerate(labels) if v is None and i not in fresh]
                name = self.teachers[k].name
                comps = [got.samples[name][(pid, i)] for i in sorted(fresh + again)]
                parts.append(sample.candidates(self.teachers[k], [(pid, 0, comps)]))
                asked.update({f"{pid}/{name}/{c.index}": (p, k, c.index) for c in comps})
            p.fresh = []
        candidates = pa.concat_tables(parts)
        columns = verify.JUDGED["candidates"] + ["text_digest", "language"]
        problems = self.problems.filter(pc.is_in(self.problems.column("problem_id"),
                                                 value_set=pc.unique(candidates.column("problem_id"))))
        verdicts = self.verdicts(candidates.select(columns), problems, got.judged)
        for cid, status, correct in zip(*(verdicts.column(c).to_pylist()
                                          for c in ("candidate_id", "status", "correct"))):
            p, k, i = asked[cid]
            p.labels[k][i] = None if status in NO_LABEL else bool(correct)

    def verdicts(self, candidates: pa.Table, problems: pa.Table, judged: verify.Judged) -> pa.Table:
        """Those the store holds (``bonforge.engine.reuse``: never one without a label, nor a timeout), the others
        judged (and kept in ``judged``)."""
        rows = self.stage.rows
        ids = rows.ids(candidates, {"problems": problems}, self.params)
        found, content = reuse.find(self.store, "verdicts", rows, ids.column("row_id"))
        parts = [pa.table({"candidate_id": ids.column("candidate_id").filter(pa.array(found)),
                           "status": content.column("status"), "correct": content.column("correct")})]
        todo = candidates.filter(pa.array(~found))
        if todo.num_rows:
            verdicts = self.stage.compute(todo, problems=problems, cfg=self.params.cfg)
            judged.add(todo, verdicts)
            parts.append(verdicts.select(["candidate_id", "status", "correct"]))
        return pa.concat_tables(parts, promote_options="permissive")


class Prefetched:
    """The engine the rounds' sampling stages get: the samples the ``Drawing`` drew, by problem and seed, for the
    prompt it sent (a template edited since renders another: that request is the engine's); a prompt it found
    skipped, none; anything else (a verdict judged otherwise by the rounds' verification, which
    only a verdict's timing can do) from ``fallback`` (a lent engine, or one made at first need and closed at the
    stage's end)."""

    def __init__(self, teacher, drawing: Drawing, fallback=None):
        self.teacher, self.name, self.drawing, self.fallback = teacher, teacher.engine, drawing, fallback
        self.own = None

    def start(self) -> None:
        pass

    def generate(self, requests: list[Request], progress=None) -> list[list[Completion]]:
        """The samples drawn; those the stream did not draw asked of the engine (only those: a drawn sample is
        never paid for twice). Unfinished, with every sample there is, when some of those fail alone."""
        got = self.drawing.get()
        name = self.teacher.name
        samples, skipped, sent = got.samples[name], got.skipped[name], got.sent.get(name, {})
        base = {r.id: problem_seed(self.teacher.seed, r.id) for r in requests}
        drawn = [r.messages == sent.get(r.id) for r in requests]  # a prompt since edited (its template): none drawn
        out = [({} if r.id in skipped else {i: c for i in range(r.n)
                                            if (c := samples.get((r.id, r.seed - base[r.id] + i)))}) if d else {}
               for r, d in zip(requests, drawn)]
        asks = [(k, start, n) for k, (r, d) in enumerate(zip(requests, drawn)) if not (d and r.id in skipped)
                for start, n in consecutive([i for i in range(r.n) if i not in out[k]])]
        short = None
        if asks:
            log.info("teacher %s: %d samples the stream did not draw", self.teacher.name, sum(n for *_, n in asks))
            try:
                answers = self._engine().generate([replace(requests[k], seed=requests[k].seed + start, n=n)
                                                   for k, start, n in asks])
            except Unfinished as e:  # each failed sample fails alone: the others are kept
                answers, short = e.results, e
            for (k, start, _), comps in zip(asks, answers):
                out[k].update({start + c.index: c for c in comps})
        if progress is not None:
            progress(sum(map(len, out)))
        result = [[replace(c, request_id=r.id, index=i) for i, c in sorted(comps.items())]
                  for r, comps in zip(requests, out)]
        if short is not None:
            raise type(short)(result, short.failed, sum(r.n for r in requests))
        return result

    def _engine(self):
        if self.fallback is None and self.own is None:
            from bonforge import llm

            self.own = llm.make_engine(self.teacher)
        engine = self.fallback or self.own
        engine.start()
        return engine

    def close(self) -> None:
        if self.fallback is not None:
            self.fallback.close()
        own, self.own = self.own, None
        if own is not None:
            own.close()
