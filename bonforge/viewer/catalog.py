"""The viewer's DuckDB catalog: the same views as `bonforge sql` (``bonforge.storage.catalog``), opened once
per run and locked down before any query runs, plus what makes a 100K-problem store quick to page.

The connection's ``runs`` and ``run_stages`` tables are copied into the database (registered Arrow tables
are seen by the connection that registered them only, and each request queries through its own cursor);
then the connection gets its memory limit (``bonforge view --memory-limit``; past it a query fails, nothing
spills to disk), external access is switched off, only the store's folder and the viewer's cache stay
readable, and the configuration is locked, so that no query (the SQL box's included) reads another file,
installs an extension or undoes the settings.

Two things are derived from a run's stages, never written into the store:

- the problem index (schema ``viewer``, in memory): one row per problem with its question, overall stats,
  each teacher's pass rate, the statuses of its verdicts and its number of GenSelect prompts; the list
  page filters and sorts it without a join;
- sorted copies (Parquet in the cache, ``<BONFORGE_HOME>/viewer-cache/<hash of the stage keys>/``) of
  problems, problem_stats and candidates joined with verdicts, ordered by problem and cut into files of
  8,192 rows whose problem ranges are kept in memory: one problem's rows are then read from one small file
  (DuckDB's cost per query grows with the row groups it has to consider, and these stages are written as
  a few files of one row group each). They are written once per set of stage keys, in a background
  thread; until they exist, pages read the stage views.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path

from bonforge.errors import StoreError
from bonforge.runtime.folders import cache_folder
from bonforge.schema import CODE_STATUSES, MATH_STATUSES
from bonforge.storage.catalog import connect
from bonforge.storage.store import StageStore

log = logging.getLogger("bonforge")
COPY_VERSION = "4"  # 3: candidates carry their published label (reference_correct); 4: trajectories (messages)
ROW_GROUP = 2048
MAX_OPEN = 4  # runs whose connection (and problem index, ~100 MB at 100K problems) stay open at once
VERDICT_COLUMNS = ("extracted", "correct", "reward", "status", "tests_passed", "tests_total", "detail", "latency_ms")
STATUSES = tuple(dict.fromkeys(MATH_STATUSES + CODE_STATUSES))
SNIPPET = 240  # characters of a question in the problem list
CANDIDATE_COLUMNS = ("candidate_id", "teacher", "sample_index", "text", "reasoning", "finish_reason", "prompt_tokens",
                     "completion_tokens", "reference_correct")


def messages_column(have: set[str], alias: str = "c.") -> str:
    """The candidates' trajectories (``messages``) where the run has any (its catalog then has the ``turns``
    view), else a null column of that name."""
    return f"{alias}messages" if "turns" in have else "NULL::VARCHAR AS messages"


class NotFound(StoreError):
    """What a request names (a run, a stage, a problem) is not in the store."""


def cache_root() -> Path:
    return cache_folder("viewer")


class Catalog:
    """Hardened catalog connections of a store, one per run, reopened when the run's record changes (a
    build that was running has finished). At most ``MAX_OPEN`` runs are held: opening one more lets go of
    the least recently used (a request still reading it keeps its cursor; sorted copies being written
    finish, and a later visit reopens the run and finds them)."""

    def __init__(self, store: StageStore, cache: Path | None = None, copies: bool = True,
                 memory_bytes: int = 2 << 30):
        self.store = store
        self.cache = Path(cache or cache_root())
        self.copies = copies
        self.memory_bytes = memory_bytes  # DuckDB's memory limit of each run's connection
        self._open: dict[str, dict] = {}
        self._let_go: list[dict] = []  # runs let go of while their sorted copies were being written
        self._lock = threading.Lock()

    def runs(self) -> list[dict]:
        return self.store.runs()

    def run(self, run_id: str | None) -> dict:
        try:
            return self.store.run(run_id or None)
        except StoreError as e:
            raise NotFound(str(e)) from None

    def cursor(self, run: dict):
        """A cursor of the run's locked connection (each request gets its own)."""
        return self._held(run)["con"].cursor()

    def views(self, run: dict) -> set[str]:
        """The stage views (and tables) of the run's catalog."""
        return self._held(run)["views"]

    def index(self, run: dict):
        """A cursor that sees the problem index (built on first use, then the sorted copies start)."""
        held = self._held(run)
        with held["lock"]:
            if not held["indexed"] and {"problems", "problem_stats"} <= held["views"]:
                _build_index(held["con"], held["views"])
                held["indexed"] = True
                if self.copies:
                    held["thread"] = threading.Thread(target=self._sorted_copies, args=(run, held), daemon=True)
                    held["thread"].start()
        return held["con"].cursor()

    def close(self) -> None:
        """Stop sorted copies still being written (a later start writes them again)."""
        with self._lock:
            held_runs = [*self._open.values(), *self._let_go]
        for held in held_runs:
            if held.get("writer") is not None:
                held["writer"].interrupt()
            if held.get("thread") is not None:
                held["thread"].join(10)

    def wait_copies(self, run: dict, timeout: float) -> bool:
        """Wait until the run's sorted copies are written (or failed); whether they are in use."""
        thread = self._held(run).get("thread")
        if thread is not None:
            thread.join(timeout)
        return bool(self._held(run)["copied"])

    def sorted_source(self, run: dict, name: str, problem_id: str) -> str | None:
        """A ``read_parquet`` of the sorted copy's files that can hold ``problem_id`` (one, or two at a
        boundary), once the copy is ready (problems, stats, cands); else None."""
        ranges = self._held(run)["copied"].get(name)
        if ranges is None:
            return None
        files = [path for low, high, path in ranges if low <= problem_id <= high] or [ranges[0][2]]
        return f"read_parquet([{', '.join(_literal(f) for f in files)}])"

    def _held(self, run: dict) -> dict:
        stamp = f"{run.status}|{run.finished}|{sorted(run.stages)}"
        with self._lock:
            held = self._open.pop(run.run_id, None)
            if held is None or held["stamp"] != stamp:
                con = self._connect(run.run_id)
                have = {name for (name,) in con.sql("SELECT table_name FROM information_schema.tables "
                                                    "WHERE table_schema = 'main'").fetchall()}
                held = {"stamp": stamp, "con": con, "views": have, "indexed": False, "copied": {},
                        "lock": threading.Lock()}
            self._open[run.run_id] = held  # the most recently used last
            while len(self._open) > MAX_OPEN:
                oldest = self._open.pop(next(iter(self._open)))
                self._let_go = [h for h in [*self._let_go, oldest] if h.get("thread") and h["thread"].is_alive()]
            return held

    def _connect(self, run_id: str):
        return open_locked(self.store, run_id, self.cache, self.memory_bytes)

    def _sorted_copies(self, run: dict, held: dict) -> None:
        """Write (or find) the sorted copies of the run's stages; each is a folder of Parquet files of
        ``ROW_GROUP * 4`` rows, whose problem_id ranges are kept here so that a lookup opens one file."""
        try:
            keys = {s: run.stages.get(s) for s in ("problems", "problem_stats", "candidates", "verdicts")}
            digest = hashlib.sha256(json.dumps([COPY_VERSION, keys], sort_keys=True).encode()).hexdigest()[:24]
            con = None
            for name, query in _copy_queries(held["views"]).items():
                folder = self.cache / digest / name
                if not folder.is_dir():
                    tmp = folder.with_name(f".{name}.tmp-{os.getpid()}-{threading.get_ident()}")
                    tmp.parent.mkdir(parents=True, exist_ok=True)
                    con = held["writer"] = con or _writer(self.store, run.run_id)
                    con.execute(f"COPY ({query}) TO {_literal(tmp)} (FORMAT parquet, COMPRESSION zstd, "
                                f"ROW_GROUP_SIZE {ROW_GROUP}, ROW_GROUPS_PER_FILE 4)")
                    os.replace(tmp, folder)
                held["copied"][name] = _ranges(folder)
        except Exception as e:  # a cache that cannot be written only makes pages slower
            log.warning("bonforge view: no sorted copies in %s (%s); pages read the stage views", self.cache,
                        str(e).splitlines()[0])
        finally:
            held["writer"] = None


def open_locked(store: StageStore, run_id: str, cache: Path | str, memory_bytes: int):
    """The run's catalog connection, locked down (module docstring): what pages and the SQL box query."""
    con = connect(store, run_id)
    for name in ("runs", "run_stages"):
        table = con.table(name).to_arrow_table()
        con.unregister(name)
        con.from_arrow(table).create(name)
    readable = [str(store.root).rstrip("/") + "/", str(cache) + "/"]
    con.execute("SET allowed_directories = ?", [readable])
    con.execute("SET parquet_metadata_cache = true")
    con.execute("SET memory_limit = ?", [f"{memory_bytes}B"])
    con.execute("SET temp_directory = ''")  # past the limit a query fails: nothing spills to disk
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def _ranges(folder: Path) -> list[tuple[str, str, str]]:
    """(lowest problem_id, highest, path) of each file of a sorted copy, in order."""
    import pyarrow.parquet as pq

    out = []
    for path in folder.glob("*.parquet"):
        meta = pq.ParquetFile(path).metadata
        if meta.num_rows:
            stats = [meta.row_group(i).column(0).statistics for i in range(meta.num_row_groups)]
            out.append((min(s.min for s in stats), max(s.max for s in stats), str(path)))
    return sorted(out)


def _literal(path: Path) -> str:
    """A path as a SQL string literal (a view cannot take parameters)."""
    return "'" + str(path).replace("'", "''") + "'"


def _writer(store: StageStore, run_id: str):
    con = connect(store, run_id)
    con.execute("SET memory_limit = '2GB'")
    return con


def _copy_queries(have: set[str]) -> dict[str, str]:
    out = {"problems": "SELECT problem_id, * EXCLUDE (problem_id) FROM problems ORDER BY problem_id",
           "stats": "SELECT problem_id, * EXCLUDE (problem_id) FROM problem_stats ORDER BY problem_id, teacher"}
    if {"candidates", "verdicts"} <= have:
        cols = ", ".join([*(f"c.{c}" for c in ("problem_id", *CANDIDATE_COLUMNS)), messages_column(have),
                          *(f"v.{c}" for c in VERDICT_COLUMNS)])
        out["cands"] = (f"SELECT {cols} FROM candidates c LEFT JOIN verdicts v USING (candidate_id) "
                        "ORDER BY c.problem_id, c.teacher, c.sample_index, c.candidate_id")
    return out


# Per problem and teacher (``*``: all teachers together), whether the most frequent extracted answer among the
# candidates is wrong (none of the answers tied for most votes is correct); problems without any extracted
# answer (code) have no row.
MAJORITY_WRONG = (
    "SELECT problem_id, teacher, NOT bool_or(ok) AS wrong FROM ("
    " SELECT problem_id, teacher, ok, votes = max(votes) OVER (PARTITION BY problem_id, teacher) AS top FROM ("
    "  SELECT problem_id, coalesce(t, '*') AS teacher, extracted, bool_or(correct) AS ok, count(*) AS votes"
    "  FROM (SELECT problem_id, teacher AS t, extracted, correct FROM verdicts WHERE extracted IS NOT NULL)"
    "  GROUP BY GROUPING SETS ((problem_id, t, extracted), (problem_id, extracted))))"
    " WHERE top GROUP BY problem_id, teacher")


def _build_index(con, have: set[str]) -> None:
    """The problem list in memory: per-teacher pass rates as columns ``rate_<i>`` (teacher ``i`` of
    ``viewer.teachers``), the verdict statuses as a bit mask over ``STATUSES``, the question in lower case."""
    teachers = [t for (t,) in con.execute("SELECT DISTINCT teacher FROM problem_stats WHERE teacher <> '*' "
                                          "ORDER BY teacher").fetchall()]
    con.execute("CREATE SCHEMA viewer")
    con.execute("CREATE TABLE viewer.teachers (i INTEGER, teacher VARCHAR)")
    con.executemany("INSERT INTO viewer.teachers VALUES (?, ?)", list(enumerate(teachers)))
    con.execute("CREATE TABLE viewer.domains AS SELECT DISTINCT domain FROM problems WHERE domain IS NOT NULL")
    rates = ", ".join(f"max(pass_rate) FILTER (WHERE teacher = ${i + 1}) AS rate_{i}" for i in range(len(teachers)))
    rates_sql = (f"(SELECT problem_id, {rates} FROM problem_stats WHERE teacher <> '*' GROUP BY ALL)" if teachers
                 else "(SELECT NULL::VARCHAR AS problem_id)")
    bits = " + ".join(f"(CASE WHEN bool_or(status = '{s}') THEN {1 << i} ELSE 0 END)" for i, s in enumerate(STATUSES))
    statuses = (f"(SELECT problem_id, ({bits})::BIGINT AS status_mask FROM verdicts GROUP BY ALL)"
                if "verdicts" in have else "(SELECT NULL::VARCHAR AS problem_id, 0::BIGINT AS status_mask)")
    majority = (f"(SELECT problem_id, wrong AS majority_wrong FROM ({MAJORITY_WRONG}) WHERE teacher = '*')"
                if "verdicts" in have else "(SELECT NULL::VARCHAR AS problem_id, NULL::BOOLEAN AS majority_wrong)")
    prompts = ("(SELECT problem_id, count(*) AS n_prompts FROM genselect GROUP BY ALL)" if "genselect" in have
               else "(SELECT NULL::VARCHAR AS problem_id, 0 AS n_prompts)")
    con.execute(
        "CREATE TABLE viewer.problems_index AS SELECT s.problem_id, p.domain, p.source, p.question, "
        "lower(p.question) AS question_lc, s.pass_rate, s.n, s.n_correct, s.pass_at_k, s.majority_at_k, s.keep, "
        "s.drop_reason, r.* EXCLUDE (problem_id), coalesce(st.status_mask, 0) AS status_mask, "
        "coalesce(g.n_prompts, 0) AS n_prompts, m.majority_wrong "
        f"FROM problem_stats s JOIN problems p USING (problem_id) LEFT JOIN {rates_sql} r USING (problem_id) "
        f"LEFT JOIN {statuses} st USING (problem_id) LEFT JOIN {prompts} g USING (problem_id) "
        f"LEFT JOIN {majority} m USING (problem_id) "
        "WHERE s.teacher = '*' ORDER BY s.problem_id", teachers)
    con.execute("CREATE UNIQUE INDEX problems_index_id ON viewer.problems_index (problem_id)")


def need(cat: Catalog, run: dict, *stages: str) -> None:
    """Raise NotFound naming the first of ``stages`` the run does not have."""
    have = cat.views(run)
    for stage in stages:
        if stage not in have:
            raise NotFound(f"run {run.run_id} has no {stage!r} stage")
