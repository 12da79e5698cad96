"""Open-ended Best-of-N on the real arena-hard files: requests without a gold answer load as problems, the
models' answers import as pool teachers, every answer is scored, and the best one per request is exported."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from llm_server import ScriptedServer, answer

from bonforge.config import load_recipe
from bonforge.flows.build import build
from bonforge.sources.problems import load_problems
from bonforge.stages.load_pool import import_pool
from bonforge.storage.store import StageStore

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "arena-hard-bon.yaml"
LANG_ONLY = ["scorers=[{name: lang, kind: language_id}, {name: chrf, kind: reference, metric: chrf}]",
             "bon.scorer=lang", "bon.filter.language=null"]


def _answers(path: Path) -> dict[str, str]:
    return {r["uid"]: r["messages"][-1]["content"]["answer"] for r in map(json.loads, path.open())}


def test_arena_hard_requests_and_answers_load(data_dir):
    recipe = load_recipe(RECIPE, ["problems.limit=40"])
    problems = load_problems(recipe.problems, data_dir / recipe.problems.source.path)
    assert problems.num_rows == 40 and set(problems.column("domain").to_pylist()) == {"open"}
    assert problems.column("answer").null_count == 40  # no reference answer
    first = json.loads((data_dir / recipe.problems.source.path).open().readline())
    assert problems.column("problem_id")[0].as_py() == first["uid"]
    assert problems.column("question")[0].as_py() == first["prompt"]
    assert json.loads(problems.column("metadata")[0].as_py())["cluster"] == first["cluster"]
    for teacher in recipe.teachers:
        path = data_dir / teacher.source.path
        cands = import_pool(teacher, path, problems)
        assert cands.num_rows == 40  # one answer per request, each matched by uid
        truth = _answers(path)
        for pid, text in zip(cands.column("problem_id").to_pylist(), cands.column("text").to_pylist()):
            assert text == truth[pid]


@pytest.mark.slow
def test_open_build_scores_picks_and_reuses_rows(tmp_path, shared_prefect):
    store = str(tmp_path / "store")
    recipe = load_recipe(RECIPE, ["problems.limit=12", *LANG_ONLY[1:],
                                  "scorers=[{name: lang, kind: language_id}]"])
    record = build(recipe, store, str(RECIPE.parent))
    st = StageStore(tmp_path / "store")
    keys = record["stages"]
    scores = pq.read_table([p for k in keys["scores"] for p in st.paths("scores", k)]).to_pylist()
    assert len(scores) == 36 and {r["scorer"] for r in scores} == {"lang"}
    assert all(r["status"] == "ok" and r["label"] == "en" and r["value"] == 1.0 for r in scores[:3])
    bon = pq.read_table(st.paths("bon", keys["bon"][0])).to_pylist()
    assert len(bon) == 12 * 4  # per request: all teachers together, and each teacher
    # every answer is English (value 1): a tie, broken by the lowest candidate_id
    every = [r for r in bon if r["pool"] == "*"]
    assert all(r["tie"] and r["candidate_id"] == min(c["candidate_id"] for c in scores
                                                     if c["problem_id"] == r["problem_id"]) for r in every)
    sft = pq.read_table(Path(record["dataset"]) / "trl" / "train.parquet").to_pylist()
    assert len(sft) == 12 and sft[0]["messages"][0]["role"] == "user"
    # one more scorer: only its rows are computed
    more = load_recipe(RECIPE, ["problems.limit=12", *LANG_ONLY])
    again = build(more, store, str(RECIPE.parent))
    mans = [st.manifest("scores", k) for k in again["stages"]["scores"]]
    assert sum(m.rows_reused for m in mans) == 36
    assert sum(m.rows_computed for m in mans) == 36
    chrf = [r for k in again["stages"]["scores"] for p in st.paths("scores", k)
            for r in pq.read_table(p).to_pylist() if r["scorer"] == "chrf"]
    assert len(chrf) == 36 and {r["status"] for r in chrf} == {"no_reference"}


@pytest.mark.slow
def test_reward_model_build_exports_sft_and_preferences_trl_trains_on(tmp_path, shared_prefect):
    """The recipe as shipped (language filter, the test reward model picking) on a few requests; TRL's
    RewardTrainer takes a step on the preference export."""
    pytest.importorskip("gguf")
    import datasets
    import torch
    from tiny_lm import tiny_lm
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trl import RewardConfig, RewardTrainer

    recipe = load_recipe(RECIPE, ["problems.limit=4", "scorers.rm.max_length=256"])
    record = build(recipe, str(tmp_path / "store"), str(RECIPE.parent))
    st = StageStore(tmp_path / "store")
    rm = [r for k in record["stages"]["scores"] for p in st.paths("scores", k)
          for r in pq.read_table(p).to_pylist() if r["scorer"] == "rm"]
    assert len(rm) == 12 and all(r["status"] == "ok" and r["n_tokens"] <= 256 for r in rm)
    assert any(r["truncated"] and r["n_tokens"] == 256 for r in rm)
    prefs = Path(record["preference_dataset"]) / "trl" / "train.parquet"
    assert json.loads((prefs.parents[1] / "manifest.json").read_text())["trainers"]["trl"]["trainer"] == "RewardTrainer"
    ds = datasets.load_dataset("parquet", data_files=str(prefs), split="train")
    assert len(ds) >= 1 and ds[0]["score_chosen"] > ds[0]["score_rejected"]
    assert ds[0]["prompt"][0]["role"] == "user" and ds[0]["chosen"][0]["role"] == "assistant"
    corpus = [m["content"] for row in ds for m in row["prompt"] + row["chosen"] + row["rejected"]]
    root = tiny_lm(tmp_path / "tiny", corpus)
    model = AutoModelForSequenceClassification.from_pretrained(root, num_labels=1, dtype=torch.float32)
    args = RewardConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, per_device_train_batch_size=1,
                        max_steps=1, max_length=4096, report_to=[], save_strategy="no", seed=0)
    tok = AutoTokenizer.from_pretrained(root)
    trainer = RewardTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
    trainer.train()
    assert trainer.state.global_step == 1


def _rate(n: int, body: dict):
    reply = answer(body)
    reply["choices"][0]["message"]["content"] = f"Fine.\nRating: [[{1 + n % 10}]]" if n % 4 else "No verdict."
    return 200, {}, reply


@pytest.mark.slow
def test_one_more_scorer_asks_the_judge_once_per_candidate_and_never_again(tmp_path, shared_prefect):
    store = str(tmp_path / "store")
    build(load_recipe(RECIPE, ["problems.limit=4", *LANG_ONLY[1:], "scorers=[{name: lang, kind: language_id}]"]),
          store, str(RECIPE.parent))
    with ScriptedServer(_rate) as server:
        judge = (f"{{name: judge, kind: judge, judge: {{name: j, engine: openai, model: j, base_url: '{server.url}', "
                 "api_key_env: null, temperature: 0}}")
        recipe = load_recipe(RECIPE, ["problems.limit=4", f"scorers=[{{name: lang, kind: language_id}}, {judge}]",
                                      "bon.scorer=judge", "bon.filter.language=lang"])
        record = build(recipe, store, str(RECIPE.parent))
        assert server.count == 12  # the judge's rows only: 4 requests x 3 answers
        again = build(recipe, store, str(RECIPE.parent))
        assert server.count == 12 and again["cached"] == again["stages"]
    st = StageStore(tmp_path / "store")
    rows = [r for k in record["stages"]["scores"] for p in st.paths("scores", k) for r in pq.read_table(p).to_pylist()
            if r["scorer"] == "judge"]
    assert sorted(r["status"] for r in rows).count("parse_error") == 3  # every 4th reply has no rating
    bon = [r for r in pq.read_table(st.paths("bon", record["stages"]["bon"][0])).to_pylist() if r["pool"] == "*"]
    assert sum(dict(r["filtered"]).get("unscored", 0) for r in bon) == 3  # unparsed: left out, never a value


def _biased(n: int, body: dict):
    """A judge that prefers the longer answer, except on requests whose text has an even length: there it
    always prefers the answer shown first (a known position bias)."""
    prompt = body["messages"][0]["content"]
    question = prompt.split("[Request]\n", 1)[1].split("\n\n[Response A]\n", 1)[0]
    a = prompt.split("[Response A]\n", 1)[1].split("\n\n[Response B]\n", 1)[0]
    b = prompt.split("[Response B]\n", 1)[1].rsplit("\n\nFirst explain", 1)[0]
    label = "A>B" if len(question) % 2 == 0 or len(a) > len(b) else "B>A" if len(b) > len(a) else "A=B"
    reply = answer(body)
    reply["choices"][0]["message"]["content"] = f"Compared.\n[[{label}]]"
    return 200, {}, reply


@pytest.mark.slow
def test_pairwise_both_orders_win_rates_and_position_bias_exact(tmp_path, shared_prefect, data_dir):
    store = str(tmp_path / "store")
    base = ["problems.limit=10", *LANG_ONLY[1:], "scorers=[{name: lang, kind: language_id}]"]
    questions = {r["uid"]: r["prompt"] for r in map(json.loads, (data_dir / "arena-hard/v0.1/question.jsonl").open())}
    answers = {t: _answers(data_dir / f"arena-hard/v0.1/model_answer/{t}.jsonl")
               for t in ("gpt-4-0314", "gpt-3.5-turbo-0125", "gpt-4-0613")}
    with ScriptedServer(_biased) as server:
        judge = f"{{name: arbiter, engine: openai, model: arbiter, base_url: '{server.url}', api_key_env: null}}"
        ev = f"evaluate={{judge: {judge}, baseline: 'teacher:gpt-4-0314', contenders: ['teacher:gpt-3.5-turbo-0125']}}"
        record = build(load_recipe(RECIPE, [*base, ev]), store, str(RECIPE.parent))
        assert server.count == 20  # 10 prompts, both orders
        st = StageStore(tmp_path / "store")
        got = st.manifest("pairwise", record["stages"]["pairwise"][0]).extra["evaluation"][
            "teacher:gpt-3.5-turbo-0125 vs teacher:gpt-4-0314"]
        pids = list(questions)[:10]
        want = {"win": 0, "loss": 0, "tie": 0, "inconsistent": 0}
        for pid in pids:
            con, bas = answers["gpt-3.5-turbo-0125"][pid], answers["gpt-4-0314"][pid]
            if len(questions[pid]) % 2 == 0:
                want["inconsistent"] += 1  # the first shown always wins: the orders disagree
            else:
                want["win" if len(con) > len(bas) else "loss" if len(con) < len(bas) else "tie"] += 1
        assert {k: got[k] for k in want} == want and got["invalid"] == 0 and got["n"] == 10
        assert got["win_rate"] == pytest.approx((want["win"] + 0.5 * (want["tie"] + want["inconsistent"])) / 10)
        assert got["inconsistent_rate"] == want["inconsistent"] / 10
        assert got["ci_low"] <= got["win_rate"] <= got["ci_high"]
        # one more contender: only its games go to the judge
        ev2 = ev.replace("contenders: [", "contenders: ['teacher:gpt-4-0613', ")
        build(load_recipe(RECIPE, [*base, ev2]), store, str(RECIPE.parent))
        assert server.count == 40
        # the Best-of-N pick (by language, all English: the lowest id, gpt-3.5's answer) is the same game as
        # gpt-3.5's: judged once, never again
        build(load_recipe(RECIPE, [*base, ev2.replace("contenders: [", "contenders: ['bon', ")]), store,
              str(RECIPE.parent))
        assert server.count == 40
