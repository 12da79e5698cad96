"""The viewer's JSON endpoints over a real store (Starlette's test client): what each returns, that it
agrees with the catalog `bonforge sql` opens, and one clear error for every bad input."""

from __future__ import annotations

import io
import json

import pyarrow.parquet as pq
import pytest
from viewer_helpers import page_client

from bonforge.storage.catalog import connect
from bonforge.storage.store import StageStore
from bonforge.viewer.app import create_app
from bonforge.storage.run_record import RunRecord

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def client(viewer_store):
    store, _ = viewer_store
    with page_client(create_app(store), base_url="http://127.0.0.1") as c:
        yield c


@pytest.fixture(scope="module")
def runs(viewer_store):
    return viewer_store[1]


def ok(res) -> dict:
    assert res.status_code == 200, res.text
    return res.json()


def error(res, status: int, *words: str) -> str:
    assert res.status_code == status, res.text
    message = res.json()["error"]
    assert "Traceback" not in message and "\n" not in message
    for word in words:
        assert word in message, message
    return message


def catalog(viewer_store, run_id):
    return connect(viewer_store[0], run_id)


# -- landing -------------------------------------------------------------------------------------------


def test_runs_newest_first_and_a_run_summary(client, runs, viewer_store):
    listed = ok(client.get("/api/runs"))["runs"]
    assert [r["run_id"] for r in listed] == [runs["selector"], runs["fusion"], runs["code"]]
    assert listed[0]["kind"] == "eval-selector" and all(r["status"] == "succeeded" for r in listed)
    s = ok(client.get("/api/run", params={"run": runs["fusion"]}))
    record = viewer_store[0].run(runs["fusion"])
    assert {(x["stage"], x["key"]) for x in s["stages"]} == {(st, k) for st, ks in record["stages"].items() for k in ks}
    man = viewer_store[0].manifest("problems", record["stages"]["problems"][0])
    assert next(x for x in s["stages"] if x["stage"] == "problems")["rows"] == man["rows"] == 12
    verdicts = [x["teacher"] for x in s["stages"] if x["stage"] == "verdicts"]  # whose each one is
    assert len(verdicts) > 1 and all(verdicts) and len(set(verdicts)) == len(verdicts), verdicts
    assert {d["kind"] for d in s["datasets"]} == {"dataset", "fusion_dataset"}
    assert all(d["version"] == 1 for d in s["datasets"])
    assert sum(d["problems"] for d in s["drops"]) == 12 and "kept" in {d["reason"] for d in s["drops"]}
    assert {"fusion", "fusion_pools", "genselect"} <= set(s["views"])
    latest = ok(client.get("/api/run"))  # no run named: the latest
    assert latest["run"]["run_id"] == runs["selector"] and "selector_eval" in latest["views"]
    cached = ok(client.get("/api/run", params={"run": runs["selector"]}))["stages"]
    assert {x["stage"] for x in cached if x["cached"]} >= {"problems", "candidates", "verdicts"}


def test_no_runs_and_unknown_runs_are_clear_errors(client, tmp_path):
    with page_client(create_app(StageStore(tmp_path / "empty")), base_url="http://127.0.0.1") as empty:
        assert ok(empty.get("/api/runs"))["runs"] == []
        error(empty.get("/api/run"), 404, "no runs recorded", "bonforge run")
        error(empty.get("/api/problems"), 404, "no runs recorded")
    error(client.get("/api/run", params={"run": "nope"}), 404, "no run 'nope'", "bonforge runs")
    error(client.get("/api/problems", params={"run": "nope"}), 404, "no run 'nope'")


def test_a_stage_the_run_does_not_have(client, runs):
    error(client.get("/api/fusion", params={"run": runs["code"], "id": "HumanEval/0"}), 404, "no 'fusion' stage")
    g = ok(client.get("/api/genselect", params={"run": runs["fusion"], "id": _any_prompt_problem(client, runs)}))
    assert g["selector_eval"] is False and all(p["judgments"] == [] for p in g["prompts"])


# -- problems ------------------------------------------------------------------------------------------


def test_problem_pages_filter_and_sort_like_sql(client, runs, viewer_store):
    con = catalog(viewer_store, runs["fusion"])
    want = con.sql("SELECT problem_id, pass_rate FROM problem_stats WHERE teacher = '*' AND pass_rate BETWEEN 0.25 "
                   "AND 0.75 ORDER BY pass_rate DESC, problem_id").fetchall()
    assert want
    got = ok(client.get("/api/problems", params={"run": runs["fusion"], "min": 0.25, "max": 0.75, "sort": "pass_rate",
                                                 "desc": 1, "size": 3}))
    assert got["total"] == len(want) and [(r["problem_id"], r["rate"]) for r in got["rows"]] == want[:3]
    page2 = ok(client.get("/api/problems", params={"run": runs["fusion"], "min": 0.25, "max": 0.75,
                                                   "sort": "pass_rate", "desc": 1, "size": 3, "page": 1}))
    assert [r["problem_id"] for r in page2["rows"]] == [p for p, _ in want[3:6]]
    row = got["rows"][0]
    assert set(row["teachers"]) == set(got["teachers"]) and len(got["teachers"]) == 4
    assert row["n"] == 4 and set(row["pass_at_k"]) == {"1", "2", "4"}
    assert len(row["question"]) <= 240


def test_teacher_kept_status_domain_and_text_filters(client, runs, viewer_store):
    con = catalog(viewer_store, runs["fusion"])
    run = runs["fusion"]
    teacher = "gpt3-175b-verifier"
    want = {p for (p,) in con.sql("SELECT problem_id FROM problem_stats WHERE teacher = ? AND pass_rate = 1",
                                  params=[teacher]).fetchall()}
    got = ok(client.get("/api/problems", params={"run": run, "teacher": teacher, "min": 1, "size": 200}))
    assert {r["problem_id"] for r in got["rows"]} == want
    kept = ok(client.get("/api/problems", params={"run": run, "kept": "kept", "size": 200}))
    dropped = ok(client.get("/api/problems", params={"run": run, "kept": "dropped", "size": 200}))
    assert kept["total"] + dropped["total"] == 12 and all(r["keep"] for r in kept["rows"])
    assert all(not r["keep"] and r["drop_reason"] for r in dropped["rows"])
    # a dropped problem's page says why in numbers: the filter's bound against the problem's pass rate
    first = dropped["rows"][0]
    overall = ok(client.get("/api/problem", params={"run": run, "id": first["problem_id"]}))["stats"][0]
    assert overall["drop_reason"] == first["drop_reason"] and "pass rate" in overall["drop_detail"]
    wrong = {p for (p,) in con.sql("SELECT DISTINCT problem_id FROM verdicts WHERE status = 'wrong_answer'").fetchall()}
    got = ok(client.get("/api/problems", params={"run": run, "status": "wrong_answer", "size": 200}))
    assert {r["problem_id"] for r in got["rows"]} == wrong
    assert ok(client.get("/api/problems", params={"run": run, "domain": "code"}))["total"] == 0
    (pid, question) = con.sql("SELECT problem_id, question FROM problems ORDER BY problem_id LIMIT 1").fetchall()[0]
    word = max(question.split(), key=len)
    hits = ok(client.get("/api/problems", params={"run": run, "q": word.upper(), "size": 200}))["rows"]
    assert pid in {r["problem_id"] for r in hits}
    assert all(word.lower() in r["question"].lower() or len(r["question"]) == 240 for r in hits)


def _majority_wrong(rows) -> dict[tuple[str, str], bool]:
    """(problem, teacher or *) -> whether the most frequent extracted answer is wrong, counted in Python."""
    votes: dict[tuple[str, str], dict[str, list[bool]]] = {}
    for pid, teacher, extracted, correct in rows:
        if extracted is None:
            continue
        for who in (teacher, "*"):
            votes.setdefault((pid, who), {}).setdefault(extracted, []).append(correct)
    out = {}
    for key, answers in votes.items():
        top = max(len(v) for v in answers.values())
        out[key] = not any(any(v) for v in answers.values() if len(v) == top)
    return out


def test_majority_wrong_filter_and_teacher_table(client, runs, viewer_store):
    run = runs["fusion"]
    con = catalog(viewer_store, run)
    verdicts = con.sql("SELECT problem_id, teacher, extracted, correct FROM verdicts").fetchall()
    majority = _majority_wrong(verdicts)
    wrong = {p for (p, t), w in majority.items() if t == "*" and w}
    right = {p for (p, t), w in majority.items() if t == "*" and not w}
    assert wrong and right  # the test store has both kinds
    got = ok(client.get("/api/problems", params={"run": run, "majority": "wrong", "size": 200}))
    assert {r["problem_id"] for r in got["rows"]} == wrong
    got = ok(client.get("/api/problems", params={"run": run, "majority": "right", "size": 200}))
    assert {r["problem_id"] for r in got["rows"]} == right
    error(client.get("/api/problems", params={"run": run, "majority": "maybe"}), 400, "majority must be")

    table = ok(client.get("/api/teachers", params={"run": run}))
    assert table["run_id"] == run
    rows = {t["teacher"]: t for t in table["teachers"]}
    teachers = {t for _, t, _, _ in verdicts}
    assert set(rows) == teachers | {"*"} and table["teachers"][0]["teacher"] == "*"
    accuracies = [t["accuracy"] for t in table["teachers"][1:]]
    assert accuracies == sorted(accuracies, reverse=True)  # the best teacher first
    for teacher in teachers:
        mine = [c for _, t, _, c in verdicts if t == teacher]
        assert rows[teacher]["candidates"] == len(mine)
        assert rows[teacher]["accuracy"] == pytest.approx(sum(mine) / len(mine))
        assert rows[teacher]["problems"] == len({p for p, t, _, _ in verdicts if t == teacher})
        assert rows[teacher]["majority_wrong"] == sum(w for (p, t), w in majority.items() if t == teacher)
    for teacher in teachers | {"*"}:
        means: dict[str, list[float]] = {}
        for (kmap,) in con.sql("SELECT pass_at_k FROM problem_stats WHERE teacher = ?", params=[teacher]).fetchall():
            for k, v in (kmap or {}).items():
                means.setdefault(str(k), []).append(v)
        assert rows[teacher]["pass_at_k"] == {k: pytest.approx(sum(v) / len(v)) for k, v in means.items()}
        assert means or teacher == "fusor"  # the fused answers are verified, not scored per problem
    assert rows["*"]["candidates"] == len(verdicts) and rows["*"]["majority_wrong"] == len(wrong)


def test_teacher_table_of_a_run_without_verdicts(tmp_path):
    from viewer_helpers import small_store

    store, run = small_store(tmp_path / "store")
    with page_client(create_app(store, copies=False)) as c:
        assert ok(c.get("/api/teachers", params={"run": run})) == {"run_id": run, "teachers": []}


def test_candidates_whose_published_label_disagrees(tmp_path):
    """/api/labels: per teacher the candidates labelled and how many disagree, then those candidates (one way or
    both, one teacher or all, paged); the controls that agree, and a verdict that is no label, never show."""
    from labelled_store import DISAGREE, RUN, labelled_store
    from viewer_helpers import small_store

    store = labelled_store(tmp_path / "store")
    with page_client(create_app(store, copies=False)) as c:
        both = ok(c.get("/api/labels", params={"run": RUN}))
        assert both["teachers"] == [{"teacher": "pool", "labelled": 5, "disagree": 2}] and both["total"] == 2
        assert {r["candidate_id"]: (r["correct"], r["reference_correct"]) for r in both["rows"]} == {
            "c1/pool/1": (False, True), "m1/pool/0": (True, False)}
        for way in both["ways"]:
            rows = ok(c.get("/api/labels", params={"run": RUN, "teacher": "pool", "way": way}))["rows"]
            assert [r["candidate_id"] for r in rows] == [cid for cid, w in DISAGREE.items() if w == way]
        second = ok(c.get("/api/labels", params={"run": RUN, "size": 1, "page": 1}))
        assert [r["candidate_id"] for r in second["rows"]] == ["m1/pool/0"] and second["total"] == 2
        problem = ok(c.get("/api/problem", params={"run": RUN, "id": "c1"}))
        assert {x["candidate_id"] for x in problem["candidates"] if x["label_disagrees"]} == {"c1/pool/1"}
        assert problem["imported"] == ["pool"]
        error(c.get("/api/labels", params={"run": RUN, "way": "sideways"}), 400, "way must be one of",
              "we_say_correct")
        error(c.get("/api/labels", params={"run": RUN, "teacher": "model"}), 400, "'model' has no published labels")
        error(c.get("/api/labels", params={"run": RUN, "size": 500}), 400, "'size'", "200")
    store, run = small_store(tmp_path / "small")
    with page_client(create_app(store, copies=False)) as c:
        error(c.get("/api/labels", params={"run": run}), 404, "no 'candidates' stage")


@pytest.mark.parametrize("params, words", [
    ({"page": -1}, ["'page'", "between 0"]), ({"size": 0}, ["'size'"]), ({"size": 201}, ["'size'", "200"]),
    ({"page": "x"}, ["'page'", "integer"]), ({"min": "abc"}, ["'min'", "number"]),
    ({"max": "nan"}, ["'max'", "finite"]),
    ({"min": 0.8, "max": 0.2}, ["pass-rate range"]), ({"min": -1}, ["pass-rate range"]),
    ({"sort": "pass_rate; DROP TABLE x"}, ["cannot sort by", "choose one of"]), ({"kept": "maybe"}, ["kept must be"]),
    ({"status": "bogus"}, ["unknown verdict status 'bogus'"]), ({"teacher": "nobody"}, ["unknown teacher 'nobody'"]),
])
def test_bad_problem_list_parameters(client, params, words):
    error(client.get("/api/problems", params=params), 400, *words)


# -- one problem, GenSelect, FusioN --------------------------------------------------------------------


def test_one_problem_has_its_candidates_and_verdicts(client, runs, viewer_store):
    con = catalog(viewer_store, runs["code"])
    pid = con.sql("SELECT problem_id FROM problems ORDER BY problem_id LIMIT 1").fetchall()[0][0]
    p = ok(client.get("/api/problem", params={"run": runs["code"], "id": pid}))
    assert p["problem"]["domain"] == "code" and len(p["candidates"]) == 8
    overall = p["stats"][0]  # the problem page carries the test-suite strength (no known-wrong candidates here)
    assert (overall["teacher"], overall["n_known_wrong"], overall["suite_strength"]) == ("*", 0, None)
    want = dict(con.sql("SELECT candidate_id, status FROM verdicts WHERE problem_id = ?", params=[pid]).fetchall())
    assert {c["candidate_id"]: c["status"] for c in p["candidates"]} == want
    assert all(c["tests_total"] and c["tests_total"] >= c["tests_passed"] >= 0 for c in p["candidates"])
    assert p["stats"][0]["teacher"] == "*" and p["stats"][0]["n"] == 8
    error(client.get("/api/problem", params={"run": runs["code"], "id": "no/such"}), 404, "no problem 'no/such'")
    error(client.get("/api/problem", params={"run": runs["code"]}), 400, "'id' is required")


def test_sorted_copies_answer_what_the_stage_views_answer(viewer_store, runs):
    store = viewer_store[0]
    with page_client(create_app(store, copies=False), base_url="http://127.0.0.1") as direct, \
            page_client(create_app(store), base_url="http://127.0.0.1") as copied:
        for run in (runs["code"], runs["fusion"]):
            ok(copied.get("/api/problems", params={"run": run}))  # builds the index, starts the copies
            cat = copied.app.state.catalog
            assert cat.wait_copies(cat.run(run), 120)
            ids = [r["problem_id"] for r in ok(direct.get("/api/problems", params={"run": run, "size": 200}))["rows"]]
            for pid in ids:
                a = ok(direct.get("/api/problem", params={"run": run, "id": pid}))
                b = ok(copied.get("/api/problem", params={"run": run, "id": pid}))
                assert a == b and a["candidates"]


def _any_prompt_problem(client, runs) -> str:
    res = ok(client.post("/api/sql", json={"sql": "SELECT problem_id FROM genselect ORDER BY prompt_id LIMIT 1",
                                           "run": runs["selector"]}))
    return res["rows"][0]["problem_id"]


def test_genselect_prompts_label_and_judgments(client, runs, viewer_store):
    pid = _any_prompt_problem(client, runs)
    g = ok(client.get("/api/genselect", params={"run": runs["selector"], "id": pid}))
    assert g["selector_eval"] and g["prompts"]
    con = catalog(viewer_store, runs["selector"])
    correct = dict(con.sql("SELECT candidate_id, correct FROM verdicts WHERE problem_id = ?", params=[pid]).fetchall())
    for p in g["prompts"]:
        assert p["correct_indices"] == [i for i, c in enumerate(p["candidate_ids"]) if correct[c]]
        assert p["n_tokens"] > 0 and p["judgments"] and p["judgments"][0]["judgment"] == 0  # the scripted pick


def test_fusion_segments_rebuild_the_fused_text_and_match_the_stage(client, runs):
    rows = ok(client.post("/api/sql", json={"sql": "SELECT problem_id FROM fusion ORDER BY problem_id",
                                            "run": runs["fusion"]}))["rows"]
    assert len(rows) == 12
    seen = set()
    for r in rows:
        f = ok(client.get("/api/fusion", params={"run": runs["fusion"], "id": r["problem_id"]}))
        assert "".join(s["text"] for s in f["segments"]) == f["fused"]["text"]
        assert f["fused"]["text"].startswith("<script>")
        counts: dict[str, int] = {}
        for s in f["segments"]:
            counts[s["owner"]] = counts.get(s["owner"], 0) + len(s["text"])
        assert counts == f["fusion"]["teacher_chars"]  # the stage's own attribution, character for character
        assert set(counts) <= set(f["legend"]) and len(f["pool"]) == 4
        seen |= set(counts) - {"multiple", "unmatched"}
    assert len(seen) >= 2  # the scripted fusor mixes two teachers' lines


def test_fusion_of_a_problem_without_a_pool(client, runs):
    error(client.get("/api/fusion", params={"run": runs["fusion"], "id": "no-such"}), 404, "no fusion pool")


# -- the SQL box ---------------------------------------------------------------------------------------


def test_sql_box_answers_one_select_paged(client, runs):
    res = ok(client.post("/api/sql", json={"sql": "SELECT candidate_id FROM candidates ORDER BY candidate_id",
                                           "run": runs["fusion"], "page": 0}))
    assert res["columns"] == ["candidate_id"] and len(res["rows"]) == 60 and res["total"] == 60 and not res["capped"]
    res = ok(client.post("/api/sql", json={"sql": "WITH x AS (SELECT 1 AS a) SELECT a FROM x;"}))
    assert res["rows"] == [{"a": 1}]


@pytest.mark.parametrize("query, words", [
    ("SELECT 1; SELECT 2", ["one SELECT statement only, not 2"]),
    ("COPY (SELECT 1) TO 'x.csv'", ["not COPY"]),
    ("CREATE TABLE t AS SELECT 1", ["not CREATE"]),
    ("INSTALL httpfs", ["not"]),
    ("SET enable_external_access = true", ["not SET"]),
    ("SELECT * FROM read_csv('/etc/passwd')", ["disabled by configuration"]),
    ("SELECT * FROM 'pyproject.toml'", []),
    ("SELECT * FROM query('COPY (SELECT 1) TO ''x.csv''')", ["single SELECT"]),  # a statement inside a SELECT
    ("SELECT * FROM query('ATTACH ''x.db'' AS x')", ["single SELECT"]),
    ("SELECT * FROM read_blob('/proc/self/environ')", ["disabled by configuration"]),
    ("SELECT * FROM glob('/*')", ["disabled by configuration"]),
    ("SELEC 1", ["syntax error"]),
    ("", ["empty"]),
])
def test_sql_box_refuses(client, query, words):
    error(client.post("/api/sql", json={"sql": query}), 400, *words)


def test_sql_box_cannot_read_files_beside_the_store(client, viewer_store):
    store = viewer_store[0]
    outside = store.root.parent / "outside.parquet"
    pq.write_table(pq.read_table(store.paths("problems", store.run()["stages"]["problems"][0])[0]), outside)
    error(client.post("/api/sql", json={"sql": f"SELECT count(*) FROM '{outside}'"}), 400, "disabled by configuration")
    inside = store.paths("problems", store.run()["stages"]["problems"][0])[0]
    assert ok(client.post("/api/sql", json={"sql": f"SELECT count(*) AS n FROM '{inside}'"}))["rows"][0]["n"] == 12


@pytest.mark.parametrize("body", ["not json", json.dumps([1]), json.dumps({"sql": 1}),
                                  json.dumps({"sql": "SELECT 1", "page": -1}),
                                  json.dumps({"sql": "SELECT 1", "run": "nope"})])
def test_sql_box_bad_bodies(client, body):
    res = client.post("/api/sql", content=body, headers={"Content-Type": "application/json"})
    assert res.status_code in (400, 404) and res.json()["error"]


# -- export --------------------------------------------------------------------------------------------


def test_export_csv_json_parquet_of_the_filtered_list(client, runs):
    params = {"view": "problems", "run": runs["fusion"], "min": 0.25, "sort": "pass_rate"}
    page = ok(client.get("/api/problems", params={**params, "size": 200}))
    ids = [r["problem_id"] for r in page["rows"]]
    res = client.get("/api/export", params={**params, "format": "parquet"})
    assert res.status_code == 200 and "attachment" in res.headers["content-disposition"]
    table = pq.read_table(io.BytesIO(res.content))
    assert table.column("problem_id").to_pylist() == ids
    lines = client.get("/api/export", params={**params, "format": "json"}).text.splitlines()
    assert [json.loads(x)["problem_id"] for x in lines] == ids
    csv = client.get("/api/export", params={**params, "format": "csv"}).text.splitlines()
    assert csv[0].startswith('"problem_id"') and len(csv) == len(ids) + 1
    sql = client.get("/api/export", params={"view": "sql", "q": "SELECT 42 AS x", "format": "json"})
    assert json.loads(sql.text) == {"x": 42}
    one = client.get("/api/export", params={"view": "problem", "run": runs["fusion"], "id": ids[0], "format": "json"})
    assert len(one.text.splitlines()) == 5  # four teachers and the fused answer


@pytest.mark.parametrize("params, status, words", [
    ({"view": "problems", "format": "xlsx"}, 400, ["format must be csv, json or parquet"]),
    ({"view": "everything"}, 400, ["cannot export view 'everything'"]),
    ({"format": "csv"}, 400, ["'view' is required"]),
    ({"view": "sql", "q": "DROP TABLE runs"}, 400, ["one SELECT statement only"]),
    ({"view": "problem", "run": "nope", "id": "x"}, 404, ["no run 'nope'"]),
])
def test_bad_exports(client, params, status, words):
    error(client.get("/api/export", params=params), status, *words)


# -- access --------------------------------------------------------------------------------------------


def test_token_gate_and_loopback_host_check(viewer_store):
    store = viewer_store[0]
    with page_client(create_app(store, token="s3cret"), base_url="http://10.0.0.5:8765") as c:
        error(c.get("/api/runs"), 403, "token")
        error(c.get("/", params={"token": "wrong"}), 403, "token")
        first = c.get("/", params={"token": "s3cret"})
        assert first.status_code == 200 and "bonforge_view_token" in first.headers["set-cookie"]
        assert ok(c.get("/api/runs"))["runs"]  # the cookie carries it from now on
    with page_client(create_app(store), base_url="http://attacker.example") as c:
        assert c.get("/api/runs").status_code == 400  # a rebound DNS name is not a loopback host
    with page_client(create_app(store), base_url="http://localhost:8765") as c:
        assert c.get("/").status_code == 200 and "app.js" in c.get("/").text
        assert c.get("/static/app.js").status_code == 200


def test_a_running_build_shows_the_stages_it_has_committed(tmp_path):
    import time

    import pyarrow as pa

    from bonforge.schema import PROBLEMS
    from bonforge.storage.run_record import utc_now

    store = StageStore(tmp_path / "store")
    kw = {"version": "1", "config": {}, "upstream": {}}
    empty = pa.Table.from_pylist([], schema=PROBLEMS)
    store.write_shard("problems", "before", 0, empty)
    store.commit("problems", "before", 1, **kw)
    time.sleep(1.1)  # manifests record whole seconds
    store.record_run(RunRecord.from_json({"run_id": "r1", "recipe_name": "x", "status": "running",
                                          "started": utc_now(), "stages": {}}))
    with page_client(create_app(store), base_url="http://127.0.0.1") as c:
        assert ok(c.get("/api/run"))["stages"] == []
        store.write_shard("problems", "during", 0, empty)
        store.commit("problems", "during", 1, **kw)
        stages = ok(c.get("/api/run"))["stages"]  # refreshed: the new stage is there, the old one is not
        assert [(s["stage"], s["key"], s["rows"]) for s in stages] == [("problems", "during", 0)]
