"""Content identities (bonforge.identity) and the sampler asked for some sample indices only."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa

from bonforge import identity
from bonforge import templates
from bonforge.selection import selector
from bonforge.engine import reuse
from bonforge.llm.base import problem_seed, problem_seeds
from bonforge.selection.selector import Selector
from bonforge.stages import sample
from bonforge.stages.sample import Sampler
from fakes import EchoEngine, openai_teacher, problems


def verdict(settings="s", domain="math", gold="4", text="x", pid="p") -> bytes:
    probs = pa.table({"problem_id": [pid], "domain": [domain], "gold": [gold]})
    return identity.verdict_ids(settings, probs, pa.table({"problem_id": [pid], "text": [text]}))[0].as_py()


def test_a_verdict_identity_covers_settings_domain_gold_and_text_only():
    base = verdict()
    assert verdict(pid="other") == base  # the problem's id is not content
    for changed in ({"settings": "t"}, {"domain": "code"}, {"gold": "5"}, {"text": "y"}, {"text": None}):
        assert verdict(**changed) != base, changed
    assert verdict(gold="ab", text="c") != verdict(gold="a", text="bc")  # parts are length-prefixed
    assert verdict(gold=None) != verdict(gold="~")  # null is not a string
    assert len(base) == 2 * identity.SIZE + 1
    assert verdict(text="") != verdict(text=None)


def test_the_language_a_record_names_is_part_of_a_verdicts_identity():
    """The same text named C++ and Java are two programs; a candidate naming none keeps the identity it had
    before the column existed (stored verdicts stay reusable)."""
    probs = pa.table({"problem_id": ["p"], "domain": ["code"], "gold": ["t"]})
    text = "int main(){}"
    named = pa.table({"problem_id": ["p"] * 3, "text": [text] * 3, "language": ["cpp", "java", None]})
    cpp, java, none = identity.verdict_ids("s", probs, named).to_pylist()
    (before,) = identity.verdict_ids("s", probs, pa.table({"problem_id": ["p"], "text": [text]})).to_pylist()
    assert len({cpp, java, none}) == 3 and none == before


def test_a_verdict_of_a_candidate_without_its_problem_is_its_own():
    probs = pa.table({"problem_id": ["p"], "domain": ["math"], "gold": ["4"]})
    cands = pa.table({"problem_id": ["q", "r"], "text": ["x", "x"]})
    a, b = identity.verdict_ids("s", probs, cands).to_pylist()
    assert a != b


def test_text_digests_read_sliced_chunked_and_null_texts_from_their_buffers():
    texts = pa.chunked_array([["skip", "a", None], ["", "a" * 10_000]]).slice(1)
    digests = identity.text_digests(texts)
    one = [identity.text_digests(pa.array([t]))[0].tobytes() for t in ["a", None, "", "a" * 10_000]]
    assert [d.tobytes() for d in digests] == one
    assert one[1] == bytes(17) and one[2][0] == 1 and len(set(one)) == 4


def test_a_sample_identity_is_the_prompt_digest_index_and_seed():
    prompts = pa.array(["same", "same"])
    at, index, seed = np.array([0, 0, 1]), np.array([0, 1, 0]), np.array([10, 11, 10])
    ids = identity.sample_ids("s", prompts, at, index, seed).to_pylist()
    assert ids[0] == ids[2] != ids[1]  # same prompt, index and seed: the same sample, whatever the problem id
    assert ids[0][identity.SIZE:] == (0).to_bytes(4, "big") + (10).to_bytes(8, "big")
    assert ids[0][:identity.SIZE] == hashlib.sha256(b"s4:same").digest()[:identity.SIZE]  # the layout stays
    other = identity.sample_ids("t", prompts, at, index, seed).to_pylist()
    assert set(other).isdisjoint(ids)
    unicode = identity.sample_ids("s", pa.array(["é€"]), np.array([0]), index[:1], seed[:1])[0].as_py()
    assert unicode[:identity.SIZE] == hashlib.sha256("s5:é€".encode()).digest()[:identity.SIZE]  # bytes, not chars


def test_the_sampler_identities_seeds_and_prompts_are_those_of_its_requests():
    t = openai_teacher(n=3, seed=5)
    shard = pa.table({"problem_id": ["a", "b"], "domain": ["math", None], "question": ["1+{x}?", "é"]})
    ids = sample._ids(shard, {}, sample.SampleParams(t))
    requests = Sampler(t, EchoEngine()).requests(shard)
    assert ids.column("seed").to_pylist() == [r.seed + i for r, _ in requests for i in range(3)]
    assert problem_seeds(5, pa.array(["a", "b"])).tolist() == [problem_seed(5, "a"), problem_seed(5, "b")]
    prompts = [r.messages[0]["content"] for r, _ in requests]
    assert prompts == [templates.render(sample.read_template(t, "math"), q) for q in ("1+{x}?", "é")]
    settings = identity.settings("sample", sample.sample_settings(t)).encode()
    assert ids.column("row_id")[4].as_py()[:identity.SIZE] == hashlib.sha256(
        settings + identity._field(prompts[1])).digest()[:identity.SIZE]


def test_a_candidate_text_is_hashed_once_where_it_is_written():
    cands = pa.table({"problem_id": ["p", "p", "p"], "text": ["x", None, "y"]})
    written = identity.with_digests(cands)
    digests = written.column("text_digest").to_pylist()
    assert digests[0] == hashlib.sha256(b"x").digest()[:identity.SIZE] and digests[1] is None
    probs = pa.table({"problem_id": ["p"], "domain": ["math"], "gold": ["4"]})
    assert identity.verdict_ids("s", probs, written).equals(identity.verdict_ids("s", probs, cands))
    forged = written.set_column(2, "text_digest", pa.array([digests[2], None, digests[0]], pa.binary(16)))
    ids = identity.verdict_ids("s", probs, forged).to_pylist()  # the identity reads the written digest
    assert ids[0] == identity.verdict_ids("s", probs, cands)[2].as_py()
    partly = written.set_column(2, "text_digest", pa.array([None, None, digests[2]], pa.binary(16)))
    assert identity.verdict_ids("s", probs, partly).equals(identity.verdict_ids("s", probs, cands))  # null: hashed


def test_identities_are_matched_exactly_by_their_bytes():
    values = pa.array([b"a" * 33, b"b" * 33, b"a" * 28, None])
    wanted = pa.chunked_array([[b"b" * 33, b"c" * 33], [b"a" * 28, None, b"a" * 33]])
    assert reuse.match(wanted, values).tolist() == [1, -1, 2, -1, 0]
    assert reuse.match(pa.array([], pa.binary()), values).tolist() == []


def test_sample_settings_leave_out_n_name_and_execution_only_fields():
    t = openai_teacher()
    same = [openai_teacher(n=16), openai_teacher(name="u"), openai_teacher(max_concurrency=3, base_url="http://x/v1")]
    assert all(sample.sample_settings(o) == sample.sample_settings(t) for o in same)
    assert sample.sample_settings(openai_teacher(temperature=0.1)) != sample.sample_settings(t)


def test_the_sampler_asks_only_for_the_missing_indices_in_runs():
    engine = EchoEngine()
    t = openai_teacher(n=8)
    todo = pa.table({"problem_id": ["p0"] * 5 + ["p1"], "sample_index": pa.array([0, 1, 3, 6, 7, 2], pa.int32())})
    out = Sampler(t, engine)(problems("What is 1+1?", "What is 2+2?"), todo=todo)
    assert [(r.id, r.n, r.seed - problem_seed(0, r.id)) for r in engine.requests] == [
        ("p0", 2, 0), ("p0", 1, 3), ("p0", 2, 6), ("p1", 1, 2)]
    rows = out.select(["candidate_id", "sample_index", "seed"]).to_pylist()
    assert [r["candidate_id"] for r in rows] == ["p0/t/0", "p0/t/1", "p0/t/3", "p0/t/6", "p0/t/7", "p1/t/2"]
    assert all(r["seed"] == problem_seed(0, r["candidate_id"][:2]) + r["sample_index"] for r in rows)


def test_a_tuple_key_is_one_value_per_row_and_no_two_tuples_share_it():
    rows = selector.rows(lambda p: (p["teacher"], 2, False))
    table = pa.table({"prompt_id": ["a1", "a", "a#1"], "run": pa.array([1, 11, 1], pa.int32())})
    keys = rows.row_keys(table).to_pylist()
    assert len(set(keys)) == 3 and rows.keys == ("prompt_id", "run")


def test_the_selector_asks_only_for_the_missing_runs_in_runs():
    engine = EchoEngine()
    t = openai_teacher()
    shard = pa.table({"prompt_id": ["a#0", "b#0"], "problem_id": ["a", "b"], "prompt": ["pick a", "pick b"],
                      "n_candidates": pa.array([2, 2], pa.int32()), "correct_indices": [[0], [1]],
                      "n_tokens": pa.array([3, 3], pa.int32()), "answer_groups": [[0, 1], [0, 1]]})
    todo = pa.table({"prompt_id": ["a#0", "a#0", "b#0"], "run": pa.array([1, 2, 0], pa.int32())})
    out = Selector(t, 4, False, engine)(shard, todo=todo)
    assert [(r.id, r.n, r.seed - problem_seed(0, r.id)) for r in engine.requests] == [("a#0", 2, 1), ("b#0", 1, 0)]
    assert [(r["prompt_id"], r["run"], r["seed"] - problem_seed(0, r["prompt_id"])) for r in out.to_pylist()] == [
        ("a#0", 1, 1), ("a#0", 2, 2), ("b#0", 0, 0)]
    ids = selector.selection_ids(shard, t, 4, False)
    assert [(r["prompt_id"], r["run"]) for r in ids.select(["prompt_id", "run"]).to_pylist()] == [
        (p, run) for p in ("a#0", "b#0") for run in range(4)]  # in the order the selector writes them
    assert len(set(ids.column("row_id").to_pylist())) == 8
    assert set(selector.selection_ids(shard, t, 4, True).column("row_id").to_pylist()).isdisjoint(
        ids.column("row_id").to_pylist())
