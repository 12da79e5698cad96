"""The viewer over a store on a real S3 server (SeaweedFS): the locked connection still reads the store's
objects, and nothing else."""

from __future__ import annotations

import pyarrow as pa
import pytest
from viewer_helpers import page_client

from bonforge.schema import CANDIDATES, PROBLEM_STATS, PROBLEMS, VERDICTS
from bonforge.storage.run_record import utc_now
from bonforge.storage.store import StageStore
from bonforge.viewer.app import create_app
from bonforge.storage.run_record import RunRecord


def small_store(store: StageStore, n: int = 6) -> None:
    """Two teachers, two samples each, per problem; every third candidate correct."""
    problems, cands, verdicts, stats = [], [], [], []
    for i in range(n):
        pid = f"p{i}"
        problems.append({"problem_id": pid, "source": "s", "domain": "math", "question": f"What is {i} + {i}?",
                         "answer": f"A: {2 * i}"})
        right = 0
        for teacher in ("ta", "tb"):
            for s in range(2):
                cid, ok = f"{pid}/{teacher}/{s}", (i + s) % 3 == 0
                right += ok
                cands.append({"candidate_id": cid, "problem_id": pid, "teacher": teacher, "sample_index": s,
                              "text": f"so {2 * i if ok else i}"})
                verdicts.append({"candidate_id": cid, "problem_id": pid, "teacher": teacher, "correct": ok,
                                 "reward": float(ok), "status": "correct" if ok else "wrong_answer",
                                 "extracted": str(2 * i if ok else i)})
        for teacher, n_, c in (("*", 4, right), ("ta", 2, right // 2), ("tb", 2, right - right // 2)):
            stats.append({"problem_id": pid, "teacher": teacher, "n": n_, "n_correct": c, "pass_rate": c / n_,
                          "mean_reward": c / n_, "keep": 0 < right / 4 <= 0.5, "stopped_early": False})
    kw = {"version": "1", "config": {}, "upstream": {}}
    for stage, rows, schema in (("problems", problems, PROBLEMS), ("candidates", cands, CANDIDATES),
                                ("verdicts", verdicts, VERDICTS), ("problem_stats", stats, PROBLEM_STATS)):
        store.write_shard(stage, "k-" + stage, 0, pa.Table.from_pylist(rows, schema=schema))
        store.commit(stage, "k-" + stage, 1, **kw)
    stages = {s: ["k-" + s] for s in ("problems", "candidates", "verdicts", "problem_stats")}
    store.record_run(RunRecord.from_json({"run_id": "r1", "recipe_name": "small", "status": "succeeded",
                                          "started": utc_now(), "finished": utc_now(), "stages": stages}))


@pytest.mark.slow
def test_the_viewer_reads_an_s3_store(seaweedfs, s3_env):
    store = StageStore(seaweedfs.url())
    small_store(store)
    with page_client(create_app(store), base_url="http://127.0.0.1") as c:
        page = c.get("/api/problems", params={"sort": "pass_rate", "desc": 1})
        assert page.status_code == 200, page.text
        assert page.json()["total"] == 6 and page.json()["rows"][0]["teachers"].keys() == {"ta", "tb"}
        cat = c.app.state.catalog
        cat.wait_copies(cat.run(None), 60)  # sorted copies (local cache) or none: the page answers either way
        one = c.get("/api/problem", params={"id": "p3"}).json()
        assert [x["status"] for x in one["candidates"]] == ["correct", "wrong_answer"] * 2
        n = c.post("/api/sql", json={"sql": "SELECT count(*) AS n FROM candidates"})
        assert n.status_code == 200 and n.json()["rows"] == [{"n": 24}], n.text
        refused = c.post("/api/sql", json={"sql": "SELECT * FROM read_csv('/etc/passwd')"})
        assert refused.status_code == 400 and "disabled by configuration" in refused.json()["error"]
    other = StageStore(seaweedfs.url())  # another prefix of the same bucket: not this viewer's store
    small_store(other)
    path = other.paths("problems", "k-problems")[0]
    with page_client(create_app(store), base_url="http://127.0.0.1") as c:
        refused = c.post("/api/sql", json={"sql": f"SELECT count(*) FROM read_parquet('{path}')"})
        assert refused.status_code == 400, refused.text
        inside = store.paths("problems", "k-problems")[0]
        assert c.post("/api/sql", json={"sql": f"SELECT count(*) AS n FROM '{inside}'"}).json()["rows"] == [{"n": 6}]
