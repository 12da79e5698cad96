import pyarrow as pa
import pytest

from bonforge.config import GenSelectConfig
from bonforge.errors import ConfigError
from bonforge.llm.base import Completion
from bonforge.llm.prices import Prices
from bonforge.schema import SELECTOR_EVAL
from bonforge.judging.judgment import parse_judgment
from bonforge.selection.prompts import answer_groups
from bonforge.selection.selector import Selector, selector_from_spec, unanimous
from bonforge.stages.select_eval import pool_prompts, summarize


@pytest.mark.parametrize("text, n, want", [
    ("Judgment: 2", 3, 2),
    ("Judgment: 1\nwait, no.\nJudgment: 0", 3, 0),  # the last one counts
    ("**Judgment:** 1", 2, 1),  # markdown bold is tolerated
    ("Judgment: **1**", 2, 1),
    ("Judgment: 3", 3, None),  # out of range
    ("Judgment: -1", 3, None),
    ("I pick candidate 1", 3, None),
    (None, 3, None),
])
def test_parse_judgment(text, n, want):
    assert parse_judgment(text, n) == want


def test_answer_groups_and_unanimity():
    assert answer_groups(["7", None, "7", "8"]) == [0, -1, 0, 1]
    assert unanimous([0, 0, 0]) and not unanimous([0, 0, 1]) and not unanimous([-1, -1]) and not unanimous([])


def test_selector_specs():
    s = selector_from_spec("openai:Qwen3-4B@http://127.0.0.1:8000/v1")
    assert (s.engine, s.model, s.base_url, s.name) == ("openai", "Qwen3-4B", "http://127.0.0.1:8000/v1", "selector")
    assert selector_from_spec("transformers:/models/tiny").engine == "transformers"
    with pytest.raises(ConfigError, match=r"@BASE_URL applies to the openai engine only"):
        selector_from_spec("vllm:m@http://x/v1")
    with pytest.raises(ConfigError, match=r"--selector 'm': expected ENGINE:MODEL\[@BASE_URL\]"):
        selector_from_spec("m")


def test_selector_yaml(tmp_path):
    good = tmp_path / "s.yaml"
    good.write_text("engine: openai\nmodel: m\nbase_url: http://h/v1\ntemperature: 0\nmax_tokens: 64\n")
    s = selector_from_spec(str(good))
    assert (s.temperature, s.max_tokens, s.name) == (0, 64, "selector")
    bad = tmp_path / "bad.yaml"
    bad.write_text("engine: openai\nmodel: m\ntop_p: 2\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: openai.top_p: Input should be less than or equal to 1"):
        selector_from_spec(str(bad))
    with pytest.raises(ConfigError, match=r"missing.yaml: cannot be read \(No such file or directory\)"):
        selector_from_spec(str(tmp_path / "missing.yaml"))
    bad.write_text("engine: openai\nmodel: m\nmodel: n\n")  # read as a recipe is: a key given twice is refused
    with pytest.raises(ConfigError, match=r"bad.yaml: line 3, column 1: key 'model' given twice"):
        selector_from_spec(str(bad))


class Scripted:
    """An engine that answers prompt p, run r with the text ``script[(p, r)]`` (skips prompt ids in ``drop``)."""

    name = "scripted"

    def __init__(self, script, drop=()):
        self.script, self.drop, self.requests = script, set(drop), []

    def start(self):
        pass

    def close(self):
        pass

    def generate(self, requests, progress=None):
        self.requests += requests
        out = []
        for r in requests:
            out.append([] if r.id in self.drop else
                       [Completion(r.id, i, self.script[(r.id, i)], None, "stop", 10, 3, r.sample_seed(i), "scripted",
                                   "m") for i in range(r.n)])
            if progress is not None:  # the samples of each request, as it is answered
                progress(sum(q.n for q in requests[:len(out)]))
        return out


def prompts():
    return pa.table({
        "prompt_id": ["a#0", "b#0", "c#0"], "problem_id": ["a", "b", "c"], "prompt": ["pa", "pb", "pc"],
        "n_candidates": [3, 2, 2], "correct_indices": [[1], [0], [0, 1]], "n_tokens": [30, 20, 50],
        "answer_groups": [[0, 1, 0], [0, 1], [0, 0]],
    })


def test_judge_rows_and_summary():
    script = {("a#0", 0): "Judgment: 1", ("a#0", 1): "Judgment: 7", ("b#0", 0): "Judgment: 1",
              ("b#0", 1): "Judgment: 0", ("c#0", 0): "Judgment: 1", ("c#0", 1): "none"}
    engine = Scripted(script)
    sel = selector_from_spec("openai:m@http://x/v1")
    heard = []
    table = Selector(sel, runs=2, skip_unanimous=True, engine=engine)(prompts(), progress=lambda *k: heard.append(k))
    assert table.schema == SELECTOR_EVAL and heard == [(2, 4), (4, 4)]  # the selections answered, as they come
    assert [r.id for r in engine.requests] == ["a#0", "b#0"]  # c#0 is unanimous
    rows = {(r["prompt_id"], r["run"]): r for r in table.to_pylist()}
    assert rows[("a#0", 0)]["correct"] and rows[("a#0", 0)]["seed"] == engine.requests[0].seed
    assert rows[("a#0", 1)]["judgment"] is None and not rows[("a#0", 1)]["parsed"]
    assert rows[("a#0", 1)]["fallback_index"] == Selector(sel, 2, True, Scripted(script))(prompts()).to_pylist()[1][
        "fallback_index"]  # the fallback pick is seeded
    assert rows[("c#0", 0)]["skipped"] and rows[("c#0", 0)]["correct"] and rows[("c#0", 0)]["judgment"] is None
    s = summarize(table)
    assert (s["prompts"], s["runs"], s["calls"], s["unparsed"], s["skipped_prompts"], s["skipped_calls"]) == (
        3, 2, 4, 1, 1, 2)
    assert s["pass@1"] == pytest.approx((1 / 3 + 1 / 2 + 1) / 3) and s["pass@N"] == 1.0
    assert s["majority@N"] == pytest.approx((0 + 0.5 + 1) / 3)  # a: 2 votes for a wrong answer; b: a tie
    assert s["selector"] == pytest.approx((2 / 3 + 2 / 3) / 2)  # run 0: a, c; run 1: b, c
    assert s["selector_std"] == pytest.approx(0.0)
    assert s["compute_saved"] == pytest.approx(100 / 200) and s["prompt_tokens_saved"] == 100


def test_a_prompt_the_engine_skipped_counts_as_unparsed():
    table = Selector(selector_from_spec("openai:m@http://x/v1"), runs=1, skip_unanimous=False,
                  engine=Scripted({("a#0", 0): "Judgment: 1", ("c#0", 0): "Judgment: 0"}, drop={"b#0"}))(prompts())
    b = [r for r in table.to_pylist() if r["prompt_id"] == "b#0"][0]
    assert not b["parsed"] and not b["skipped"] and b["response"] is None and b["seed"] is None


def test_each_row_records_what_its_call_cost_at_the_selector_prices():
    """10 prompt and 3 completion tokens an answer at $2 / $10 per million: $0.00005 a call; a prompt not sent
    (unanimous) or not answered costs nothing; without prices every cost is unknown (null)."""
    script = {("a#0", 0): "Judgment: 1", ("c#0", 0): "Judgment: 0"}
    priced = selector_from_spec("openai:m@http://x/v1").model_copy(update={"prices": Prices(input=2.0, output=10.0)})
    sel = Selector(priced, runs=1, skip_unanimous=True, engine=Scripted(script, drop={"b#0"}))
    cost = {r["prompt_id"]: r["cost_usd"] for r in sel(prompts()).to_pylist()}
    assert cost == {"a#0": pytest.approx(5e-5), "b#0": 0.0, "c#0": 0.0} and sel.spent_usd == pytest.approx(5e-5)
    unpriced = Selector(selector_from_spec("openai:m@http://x/v1"), runs=1, skip_unanimous=True,
                        engine=Scripted(script, drop={"b#0"}))
    assert unpriced(prompts()).column("cost_usd").null_count == 3 and unpriced.spent_usd == 0.0


def test_pool_prompts_take_reliable_candidates_up_to_the_limit():
    rows = []
    for pid, answers in (("p", ["1", "2", "2", "3", "1"]), ("q", ["5"])):
        for i, a in enumerate(answers):
            rows.append({"problem_id": pid, "question": f"Q {pid}", "domain": "math", "candidate_id": f"{pid}/t/{i}",
                         "text": f"answer {a}", "correct": a == "1", "status": "timeout" if i == 4 else "ok",
                         "extracted": a})
    out = pool_prompts(pa.Table.from_pylist(rows), GenSelectConfig(max_candidates=3), seed=0).to_pylist()
    assert [r["prompt_id"] for r in out] == ["p#pool"]  # q has one candidate
    (p,) = out
    assert p["n_candidates"] == 3 and "Q p" in p["prompt"] and p["prompt"].count("### Candidate ") == 3
    texts = [line for line in p["prompt"].splitlines() if line.startswith("answer ")]
    assert p["correct_indices"] == [i for i, t in enumerate(texts) if t == "answer 1"]
    assert p["answer_groups"] == answer_groups([t.split()[1] for t in texts])
