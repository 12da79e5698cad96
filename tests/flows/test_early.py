"""Early stopping without rounds (``bonforge.flows.early.draw``) on its own: a problem draws what the rule of the
rounds draws, and a sample judged without a label (``schema.NO_LABEL``) is unknown: not right, and judged again
when its problem draws more, so that a label it then gets decides."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bonforge.config import load_recipe
from bonforge.flows import early
from bonforge.judging import math as verify_math
from bonforge.llm.base import Completion, problem_seed
from bonforge.storage.store import StageStore

RIGHT = [True, True, False, True, False, True, False, False]  # sample k of the problem is right iff RIGHT[k]


class Engine:
    """Answers "What is 1 + 2?" right (3) for the samples ``RIGHT`` says, else 4."""

    name = "fake"

    def __init__(self, teacher):
        self.teacher, self.asked = teacher, []

    def start(self) -> None:
        pass

    def generate(self, requests, progress=None):
        out = []
        for r in requests:
            base = problem_seed(self.teacher.seed, r.id)
            self.asked += [r.seed - base + i for i in range(r.n)]
            out.append([Completion(r.id, i, f"\\boxed{{{3 if RIGHT[r.seed - base + i] else 4}}}", None, "stop", 5, 3,
                                   r.seed + i, self.name, self.teacher.model) for i in range(r.n)])
        return out

    def close(self) -> None:
        pass


def recipe(folder: Path):
    (folder / "p.jsonl").write_text('{"id": "p", "question": "What is 1 + 2?", "answer": "3"}\n')
    (folder / "recipe.yaml").write_text("""
name: unknown
problems: {name: toy, source: {path: p.jsonl}, fields: {id: id}}
teachers:
  - {name: t, engine: openai, base_url: "http://127.0.0.1:9/v1", api_key_env: null, model: m, n: 8}
filter: {max_pass_rate: 0.25, early_stop: true}
export: {name: toy-genselect}
""")
    return load_recipe(folder / "recipe.yaml")


PROBLEMS = pa.table({"problem_id": ["p"], "domain": ["math"], "question": ["What is 1 + 2?"], "answer": ["3"],
                     "tests": pa.nulls(1, pa.string())})


def drawn(tmp_path: Path, monkeypatch, no_label_once: set[int]) -> tuple[list[int], list[int]]:
    """The samples drawn (in the order asked) with the judge failing (``infra_error``) on the first verdict of each
    sample of ``no_label_once``; the samples judged, in order."""
    r = recipe(tmp_path)
    engine, judged, real = Engine(r.teachers[0]), [], verify_math.verify_math

    def flaky(candidates, problems, cfg):
        out = real(candidates, problems, cfg).to_pylist()
        for row in out:
            index = int(row["candidate_id"].rsplit("/", 1)[1])
            if index in no_label_once and index not in judged:
                row.update(status="infra_error", correct=False)
            judged.append(index)
        return pa.Table.from_pylist(out, schema=real(candidates, problems, cfg).schema)

    monkeypatch.setattr(verify_math, "verify_math", flaky)
    got = early.draw(r, StageStore(tmp_path / "store"), PROBLEMS, {"t": engine}, {"math"})
    assert sorted(i for _, i in got.samples["t"]) == engine.asked
    return engine.asked, judged


def test_the_problem_draws_what_the_rounds_draw(tmp_path, monkeypatch):
    # three right are too easy (3 / 8 > 0.25): 0, 1, 2 first (two right), then one more: 3 (right): closed
    assert drawn(tmp_path, monkeypatch, set()) == ([0, 1, 2, 3], [0, 1, 2, 3])


def test_a_sample_without_a_label_is_unknown_and_judged_again(tmp_path, monkeypatch):
    # sample 0 without a label: one right of 0, 1, 2, so two more (3, 4); with them sample 0 is judged again,
    # right: three right, closed (counted wrong, it would have drawn sample 5 as well)
    asked, judged = drawn(tmp_path, monkeypatch, {0})
    assert asked == [0, 1, 2, 3, 4]
    assert sorted(judged) == [0, 0, 1, 2, 3, 4]


def served(folder: Path, url: str, problems: int):
    """A recipe drawing ``problems`` toy problems from a priced teacher at ``url`` (never right: each is drawn in
    full, 8 samples)."""
    (folder / "p.jsonl").write_text("".join(f'{{"id": "p{i}", "question": "What is 1 + {i}?", "answer": "x"}}\n'
                                            for i in range(problems)))
    (folder / "recipe.yaml").write_text(f"""
name: served
problems: {{name: toy, source: {{path: p.jsonl}}, fields: {{id: id}}}}
teachers:
  - {{name: t, engine: openai, base_url: "{url}", api_key_env: null, model: m, n: 8, max_tokens: 32, max_retries: 0,
     max_concurrency: 4, prices: {{input: 100, output: 1000}}}}
filter: {{max_pass_rate: 0.25, early_stop: true}}
export: {{name: toy-genselect}}
""")
    recipe = load_recipe(folder / "recipe.yaml")
    table = pa.table({"problem_id": [f"p{i}" for i in range(problems)], "domain": ["math"] * problems,
                      "question": [f"What is 1 + {i}?" for i in range(problems)], "answer": ["x"] * problems,
                      "tests": pa.nulls(problems, pa.string())})
    return recipe, table


def test_a_sample_that_fails_alone_stops_the_drawing_and_every_answer_received_is_kept(tmp_path):
    """The budget refuses a sample mid-draw: the draw raised, and every answer it had received (paid for) was
    lost with it, to be asked and paid for again. Now it stops drawing, waits for what is in flight and keeps it
    all. The control: without a budget, every problem is drawn in full."""
    from llm_server import ScriptedServer

    from bonforge.llm.base import Request
    from bonforge.llm.budget import request_worst, spending
    from bonforge.llm.openai import OpenAIEngine

    with ScriptedServer() as server:
        r, problems = served(tmp_path, server.url, 6)
        worst = request_worst(r.teachers[0].prices, Request(id="p0", messages=(
            {"role": "user", "content": early.sample.prompts(problems, r.teachers[0], {})[0][1]},), max_tokens=32))
        with spending(4 * worst) as budget:
            got = early.draw(r, StageStore(tmp_path / "store"), problems, {"t": OpenAIEngine(r.teachers[0])},
                             {"math"})
        stopped = server.count
        assert budget.exhausted and "not sent: over the budget" in str(got.failed)
        assert 4 <= len(got.samples["t"]) == stopped < 48  # every answer received is held, nothing twice
        whole = early.draw(r, StageStore(tmp_path / "other"), problems, {"t": OpenAIEngine(r.teachers[0])},
                           {"math"})
    assert whole.failed is None and len(whole.samples["t"]) == 48 == server.count - stopped


QUESTION = ({"role": "user", "content": "q"},)


class Drawn:
    """A drawing that drew samples 0, 1 and 3 of problem p (of 6), asking ``QUESTION``."""

    def __init__(self, teacher):
        base = problem_seed(teacher.seed, "p")
        self.got = early.Drawn({teacher.name: {("p", i): Completion("p", i, f"drawn {i}", None, "stop", 5, 3, base + i,
                                                                     "e", "m") for i in (0, 1, 3)}},
                               {teacher.name: set()}, None, sent={teacher.name: {"p": QUESTION}})

    def get(self):
        return self.got


class Refusing(Engine):
    """Answers every sample but the one of seed offset 4 (refused past its retries)."""

    def generate(self, requests, progress=None):
        from bonforge.llm.base import Unfinished

        base = problem_seed(self.teacher.seed, "p")
        out, failed = [], []
        for r in requests:
            self.asked += [r.seed - base + i for i in range(r.n)]
            out.append([Completion(r.id, i, f"asked {r.seed - base + i}", None, "stop", 5, 3, r.seed + i, "e", "m")
                        for i in range(r.n) if r.seed - base + i != 4])
            failed += [(r.id, i, "HTTP 429") for i in range(r.n) if r.seed - base + i == 4]
        if failed:
            raise Unfinished(out, failed, sum(r.n for r in requests))
        return out


def test_the_rounds_ask_only_for_the_samples_not_drawn_and_keep_the_drawn_when_one_fails(tmp_path):
    """The samples the stream did not draw: the whole request was asked again (the drawn ones paid twice), and
    an engine's Unfinished for them lost the drawn ones (its results covered the asked requests only: the stage
    failed, "engine returned 1 results for 2 requests"). The control: a request drawn in full asks nothing."""
    from bonforge.llm.base import Request, Unfinished

    teacher = recipe(tmp_path).teachers[0]
    engine = Refusing(teacher)
    prefetched = early.Prefetched(teacher, Drawn(teacher), engine)
    base = problem_seed(teacher.seed, "p")
    whole, rest = (Request(id="p", messages=QUESTION, n=2, seed=base),
                   Request(id="p", messages=QUESTION, n=4, seed=base + 2))
    with pytest.raises(Unfinished) as e:
        prefetched.generate([whole, rest])
    assert engine.asked == [2, 4, 5]  # never 0, 1 or 3
    assert [[c.text for c in comps] for comps in e.value.results] == [["drawn 0", "drawn 1"],
                                                                      ["asked 2", "drawn 3", "asked 5"]]
    assert [[c.index for c in comps] for comps in e.value.results] == [[0, 1], [0, 1, 3]]
    assert prefetched.generate([whole])[0][1].text == "drawn 1" and engine.asked == [2, 4, 5]


# -- the journal of draws, attacked ---------------------------------------------------------------------------
class Plan:
    key = "rounds-key"


def opened(store: StageStore, teachers: list) -> early.Journal:
    """A journal of ``teachers`` in the first round's folder, drawing from ``PROBLEMS``."""
    journal = early.Journal(store, Plan(), teachers)
    journal.pin(PROBLEMS, early.identities(PROBLEMS, teachers))
    return journal


def journaled(tmp_path: Path, teacher, indexes: list[list[int]]) -> tuple[StageStore, early.Journal]:
    """A journal of ``teacher``'s samples of problem p, one file per list of ``indexes``."""
    store = StageStore(tmp_path / "store")
    journal = opened(store, [teacher])
    base = problem_seed(teacher.seed, "p")
    for part in indexes:
        journal._write(teacher, [Completion("p", i, f"drawn {i}", None, "stop", 5, 3, base + i, "e", teacher.model)
                                 for i in part])
    return store, journal


def test_one_unreadable_journal_file_loses_its_samples_only(tmp_path):
    """A zero-byte journal file (a store that lost it, a copy cut short) sorted before the others made every
    journal file unread (one row index over them all): every sample drawn was asked and paid for again. Now the
    others' samples are found. The controls: every file readable, all found; a teacher of other settings (the
    same rounds key: it covers names and n only) finds none of them, nor does a problem of the same id whose
    question differs."""
    teacher = recipe(tmp_path).teachers[0]
    store, journal = journaled(tmp_path, teacher, [[0, 1], [2]])
    assert sorted(early.stored(store, teacher, PROBLEMS, journal.files())) == [("p", 0), ("p", 1), ("p", 2)]
    (tmp_path / "template.txt").write_text("Solve: {question}")
    for change in ({"temperature": 0.7}, {"max_tokens": 99}, {"seed": 1}, {"model": "m2"}, {"top_p": 0.5},
                   {"prompt_template": str(tmp_path / "template.txt")}):
        assert early.stored(store, teacher.model_copy(update=change), PROBLEMS, journal.files()) == {}, change
    other = PROBLEMS.set_column(2, "question", pa.array(["What is 2 + 2?"]))
    assert early.stored(store, teacher, other, journal.files()) == {}
    journal.files()[0].write_bytes(b"")
    assert sorted(early.stored(store, teacher, PROBLEMS, journal.files())) == [("p", 2)]


def test_a_journal_file_whose_data_is_cut_leaves_the_next_files_found(tmp_path):
    """A journal file whose footer reads but whose data does not: the files after it were not read at all."""
    teacher = recipe(tmp_path).teachers[0]
    store, journal = journaled(tmp_path, teacher, [[0], [1], [2]])
    first = journal.files()[0]
    raw = first.read_bytes()
    first.write_bytes(raw[:4] + b"\0" * (len(raw) - 4 - 1024) + raw[-1024:])  # its pages zeroed, its footer kept
    assert sorted(early.stored(store, teacher, PROBLEMS, journal.files())) == [("p", 1), ("p", 2)]


class Failing(Engine):
    """Answers its first call, then fails as no retry can fix."""

    def generate(self, requests, progress=None):
        if self.asked:
            raise RuntimeError("the engine died")
        return super().generate(requests, progress)


def test_a_drawing_that_fails_keeps_in_its_journal_what_it_drew(tmp_path):
    """The samples held for the journal (less than a shard's rows) were dropped when the drawing raised: paid for,
    then asked again by the rerun. The control: the rerun asks only for the rest and writes them too, once."""
    r = recipe(tmp_path)
    teacher = r.teachers[0]
    store = StageStore(tmp_path / "store")
    journal = opened(store, [teacher])
    with pytest.raises(RuntimeError, match="the engine died"):
        early.draw(r, store, PROBLEMS, {"t": Failing(teacher)}, {"math"}, journal=journal)
    assert sorted(early.stored(store, teacher, PROBLEMS, journal.files())) == [("p", 0), ("p", 1), ("p", 2)]
    engine = Engine(teacher)
    got = early.draw(r, store, PROBLEMS, {"t": engine}, {"math"}, journal=opened(store, [teacher]))
    assert engine.asked == [3] and len(journal.files()) == 2
    assert sorted(early.stored(store, teacher, PROBLEMS, journal.files())) == sorted(got.samples["t"]) == [
        ("p", i) for i in range(4)]


def test_forgetting_the_journal_removes_the_writes_a_kill_cut_short(tmp_path):
    """A build killed while it wrote a journal file left its temp file (a shard's rows) in the first round's
    folder, which no later build removed. The controls: a live writer's temp and the round's own files stay."""
    import os
    import socket
    import subprocess
    import sys

    teacher = recipe(tmp_path).teachers[0]
    store, journal = journaled(tmp_path, teacher, [[0]])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = socket.gethostname()
    cut = journal.folder / f".drawn-t-00001.parquet.tmp-{host}-{dead.stdout.strip()}"
    live = journal.folder / f".drawn-t-00002.parquet.tmp-{host}-{os.getpid()}"
    own = journal.folder / "part-00000.parquet"
    for f in (cut, live, own):
        f.write_bytes(b"x")
    journal.forget([])
    assert sorted(p.name for p in journal.folder.iterdir()) == sorted([live.name, own.name,
                                                                       *(f.name for f in journal.files())])


def test_a_journal_of_odd_rows_gives_each_sample_once_and_as_written(tmp_path):
    """A journal file holding a sample twice (the second text another) and a sample of a problem not in the set,
    another a text with a NUL and one of 1 MB: each sample of p is found once (the twice-written one as one of its
    two writes), the texts byte for byte; the foreign problem's row is never found."""
    teacher = recipe(tmp_path).teachers[0]
    store = StageStore(tmp_path / "store")
    journal = opened(store, [teacher])

    def drawn(pid: str, i: int, text: str) -> Completion:
        return Completion(pid, i, text, None, "stop", 5, 3, problem_seed(teacher.seed, pid) + i, "e", teacher.model)

    journal._write(teacher, [drawn("p", 0, "first"), drawn("p", 0, "second"), drawn("q", 1, "foreign")])
    journal._write(teacher, [drawn("p", 1, "a\0b"), drawn("p", 2, "x" * 1_000_000)])
    got = early.stored(store, teacher, PROBLEMS, journal.files())
    assert sorted(got) == [("p", 0), ("p", 1), ("p", 2)] and got[("p", 0)].text in ("first", "second")
    assert got[("p", 1)].text == "a\0b" and got[("p", 2)].text == "x" * 1_000_000



def test_two_journals_in_one_folder_never_write_one_file_and_forget_only_what_candidates_hold(tmp_path):
    """Two builds drawing at once into one round's folder (the same recipe, or a teacher of other settings: the
    rounds' key names teachers and n only) each numbered its files from what the folder held when it began: the
    later one's first file had the name of the earlier one's next, and one overwrote the other (its samples lost
    to a rerun). And the first to finish removed every journal file, the other build's too (of other settings:
    all it drew lost to its rerun). Now each writer names its own files, and a file goes once committed
    candidates hold all its samples, whoever wrote it; the controls: such a file of another writer goes, and so
    does one no one can read."""
    teacher = recipe(tmp_path).teachers[0]
    other = teacher.model_copy(update={"temperature": 0.7})
    store, first = journaled(tmp_path, teacher, [[0]])
    second, third = opened(store, [teacher]), opened(store, [other])
    base = problem_seed(teacher.seed, "p")
    for journal, t, i in ((second, teacher, 1), (first, teacher, 2), (third, other, 0)):
        journal._write(t, [Completion("p", i, f"drawn {i}", None, "stop", 5, 3, base + i, "e", t.model)])
    files = first.files()
    assert len(files) == 4
    assert sorted(early.stored(store, teacher, PROBLEMS, files)) == [("p", 0), ("p", 1), ("p", 2)]
    assert sorted(early.stored(store, other, PROBLEMS, files)) == [("p", 0)]
    others = [f for f in files if f"-{third.writer}-" in f.name]

    class Candidates:  # the final candidates of ``teacher`` committed, holding samples 0, 1 and 2
        key = "candidates-key"
        manifest = type("Manifest", (), {"row_index": "rows.parquet"})

    index = store.loc.path("stages", "candidates", Candidates.key, "rows.parquet")
    index.parent.mkdir(parents=True)
    pq.write_table(pa.concat_tables([early.reuse.footer_piece(store, f) for f in files if f not in others]), index)
    (first.folder / "drawn-t-gone-00000.parquet").write_bytes(b"")
    second.forget([Candidates])  # the build that finishes first (not the writer of sample 0 and 2)
    assert second.files() == others
    assert sorted(early.stored(store, other, PROBLEMS, others)) == [("p", 0)]


def test_a_sample_is_read_from_the_journal_file_that_holds_its_identity(tmp_path):
    """Teachers of other settings (the same name and n: one rounds key) journal samples of one candidate id
    (``p/t/0``) into one folder. The journal's row index over all files matched each identity to its candidate id,
    then took the row of that id from the first file (by name) holding one: the sample of the other temperature,
    whichever file's writer id sorted first; a wrong label in the dataset. Now each sample comes from the file
    whose footer names its identity; the controls: each teacher gets its own text, in either name order."""
    teacher = recipe(tmp_path).teachers[0]
    other = teacher.model_copy(update={"temperature": 0.7})
    store = StageStore(tmp_path / "store")
    base = problem_seed(teacher.seed, "p")
    for order in ((teacher, other), (other, teacher)):
        journals = [opened(store, [t]) for t in order]
        for k, (journal, t) in enumerate(zip(journals, order)):
            journal.writer = f"{k}{journal.writer}"  # the first of ``order`` sorts first
            journal._write(t, [Completion("p", 0, f"T={t.temperature}", None, "stop", 5, 3, base, "e", t.model)])
        files = journals[0].files()
        for t in order:
            assert early.stored(store, t, PROBLEMS, files)[("p", 0)].text == f"T={t.temperature}"
        for f in files:
            f.unlink()


def test_a_journal_file_the_store_refuses_to_remove_stays_and_fails_nothing(tmp_path, monkeypatch, caplog):
    """A store that lets a build write but not delete (an object store's policy, a folder gone read-only) made
    ``forget`` raise after the final candidates were committed: the build failed, and so did every rerun (it
    forgets again). Now the file stays, with a warning naming it; the control: a file that can go, goes."""
    teacher = recipe(tmp_path).teachers[0]
    store, journal = journaled(tmp_path, teacher, [[0], [1]])
    index = store.loc.path("stages", "candidates", "c", "rows.parquet")
    index.parent.mkdir(parents=True)
    pq.write_table(pa.concat_tables([early.reuse.footer_piece(store, f) for f in journal.files()]), index)
    Candidates = type("Candidates", (), {"key": "c", "manifest": type("M", (), {"row_index": "rows.parquet"})})
    kept, remove = journal.files()[0], store.loc.remove

    def refusing(path):
        if path == kept:
            raise PermissionError(13, "Permission denied", str(path))
        remove(path)

    def dead_temps(folder):
        raise PermissionError(13, "Permission denied", str(folder))

    monkeypatch.setattr(store.loc, "remove", refusing)
    monkeypatch.setattr(store.loc, "remove_dead_temps", dead_temps)
    journal.forget([Candidates])
    assert journal.files() == [kept] and kept.name in caplog.text


def test_a_journal_on_an_s3_store_is_found_read_and_forgotten(tmp_path, s3_env, seaweedfs):
    """The journal on an object store (its names listed, footers and rows read over the network, files removed);
    controls: a teacher of other settings finds none of it, and a file whose samples no candidates hold stays."""
    teacher = recipe(tmp_path).teachers[0]
    store = StageStore(seaweedfs.url())
    journal = opened(store, [teacher])
    base = problem_seed(teacher.seed, "p")
    for part in ([0, 1], [2]):
        journal._write(teacher, [Completion("p", i, f"drawn {i}", None, "stop", 5, 3, base + i, "e", teacher.model)
                                 for i in part])
    files = journal.files()
    got = early.stored(store, teacher, PROBLEMS, files)
    assert len(files) == 2 and {k: c.text for k, c in got.items()} == {("p", i): f"drawn {i}" for i in range(3)}
    assert early.stored(store, teacher.model_copy(update={"temperature": 0.7}), PROBLEMS, files) == {}
    Candidates = type("Candidates", (), {"key": "c", "manifest": type("M", (), {"row_index": "rows.parquet"})})
    store.loc.write_parquet(early.reuse.footer_piece(store, files[0]),
                            store.loc.path("stages", "candidates", "c", "rows.parquet"))
    journal.forget([Candidates])
    assert journal.files() == files[1:]


def test_teachers_whose_names_extend_one_another_keep_their_own_journals(tmp_path):
    """Teachers ``a`` and ``a-1`` of other settings (a name that reads as ``a``'s file name with a writer id): each
    finds only its own samples, and forgetting ``a``'s committed samples leaves ``a-1``'s file (files are told
    apart by the identities in their footers, never by their names; teachers of the same settings share samples
    by design: the identity leaves the name out)."""
    t = recipe(tmp_path).teachers[0]
    a, a1 = t.model_copy(update={"name": "a"}), t.model_copy(update={"name": "a-1", "temperature": 0.7})
    store = StageStore(tmp_path / "store")
    base = problem_seed(t.seed, "p")
    journals = {x.name: opened(store, [x]) for x in (a, a1)}
    for x in (a, a1):
        journals[x.name]._write(x, [Completion("p", 0, x.name, None, "stop", 5, 3, base, "e", x.model)])
    files = journals["a"].files()
    assert {x.name: early.stored(store, x, PROBLEMS, files)[("p", 0)].text for x in (a, a1)} == {"a": "a", "a-1": "a-1"}
    mine = [f for f in files if f"-{journals['a'].writer}-" in f.name]
    index = store.loc.path("stages", "candidates", "c", "rows.parquet")
    index.parent.mkdir(parents=True)
    pq.write_table(early.reuse.footer_piece(store, mine[0]), index)
    journals["a"].forget([type("C", (), {"key": "c", "manifest": type("M", (), {"row_index": "rows.parquet"})})])
    assert journals["a"].files() == [f for f in files if f not in mine]


class Editing(Engine):
    """``Engine``, and the recipe's prompt template edited (to ``then``) while it answers its first request (a user
    changing the prompt for the next build while this one draws); what each request's prompt was kept."""

    def __init__(self, teacher, template: Path, then: str):
        super().__init__(teacher)
        self.template, self.then, self.prompts = template, then, []

    def generate(self, requests, progress=None):
        self.prompts += [r.messages[0]["content"] for r in requests]
        self.template.write_text(self.then)
        return super().generate(requests, progress)


def test_a_template_edited_while_the_stream_draws_names_no_sample_it_wrote(tmp_path):
    """The journal computed each file's identities when it wrote the file, reading the prompt template then: the
    samples drawn with the prompt of the template as it was were written under the identities of the edited one,
    and a rerun with the edited template (the same rounds key: names and n) took them as its own: samples of
    another prompt in its dataset. Now the identities are those of the prompts sent; the controls: every sample is
    found under the template they were drawn with, and none under the edited one."""
    r = recipe(tmp_path)
    template = tmp_path / "template.txt"
    template.write_text("Solve: {question}")
    teacher = r.teachers[0].model_copy(update={"prompt_template": str(template)})
    r = r.model_copy(update={"teachers": [teacher]})
    store = StageStore(tmp_path / "store")
    journal = opened(store, [teacher])
    engine = Editing(teacher, template, "Answer: {question}")
    got = early.draw(r, store, PROBLEMS, {"t": engine}, {"math"}, journal=journal)
    assert set(engine.prompts) == {"Solve: What is 1 + 2?"} and got.samples["t"]
    assert early.stored(store, teacher, PROBLEMS, journal.files()) == {}  # the template now: the edited one
    template.write_text("Solve: {question}")
    assert sorted(early.stored(store, teacher, PROBLEMS, journal.files())) == sorted(got.samples["t"])


def test_a_round_whose_prompt_is_not_the_one_drawn_gets_no_drawn_sample(tmp_path):
    """A prompt template edited while the stream drew: the rounds' sampling stages made after it (their keys and
    identities the edited template's) were given the samples drawn with the old prompt (``Prefetched`` matched
    them by problem and seed only), and committed them as the new prompt's. Now a request whose prompt is not
    the one drawn is asked of the engine; the control: the drawn prompt asks nothing."""
    from bonforge.llm.base import Request

    r = recipe(tmp_path)
    teacher = r.teachers[0]
    got = early.draw(r, StageStore(tmp_path / "store"), PROBLEMS, {"t": Engine(teacher)}, {"math"})
    drawn = sorted(i for _, i in got.samples["t"])
    engine = Engine(teacher)
    prefetched = early.Prefetched(teacher, type("Drawing", (), {"get": lambda self: got})(), engine)
    sent = early.sample.prompts(PROBLEMS, teacher, {})[0][1]
    base = problem_seed(teacher.seed, "p")
    for prompt, asked in ((sent, []), (f"Edited: {sent}", drawn)):
        engine.asked = []
        request = Request(id="p", messages=({"role": "user", "content": prompt},), n=len(drawn), seed=base)
        assert len(prefetched.generate([request])[0]) == len(drawn) and engine.asked == asked, prompt
