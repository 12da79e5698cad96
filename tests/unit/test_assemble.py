import math

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bonforge.config import GenSelectConfig
from bonforge.errors import ConfigError
from bonforge.tasks.assemble import assemble, check_prompt, feasible_sizes, template_text


def pool(spec: dict[str, list[bool]], text_len: int = 20, domain: str = "math", statuses=None) -> pa.Table:
    rows = []
    for pid, flags in spec.items():
        for i, ok in enumerate(flags):
            rows.append(
                {
                    "problem_id": pid,
                    "question": f"Q {pid}?",
                    "domain": domain,
                    "candidate_id": f"{pid}/t/{i}",
                    "text": f"cand {pid} {i} " + "x" * text_len,
                    "correct": ok,
                    "status": (statuses or {}).get(f"{pid}/t/{i}", "correct" if ok else "wrong_answer"),
                }
            )
    schema = pa.schema(
        [
            ("problem_id", pa.string()),
            ("question", pa.string()),
            ("domain", pa.string()),
            ("candidate_id", pa.string()),
            ("text", pa.string()),
            ("correct", pa.bool_()),
            ("status", pa.string()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


@settings(max_examples=80, deadline=None)
@given(
    st.dictionaries(
        st.text("abc", min_size=1, max_size=3), st.lists(st.booleans(), min_size=0, max_size=24), min_size=1, max_size=6
    ),
    st.integers(2, 4),
    st.integers(4, 16),
    st.sampled_from([0.5, 0.34, 1.0]),
    st.integers(0, 3),
)
def test_every_prompt_obeys_the_composition_rule(spec, lo, hi, frac, seed):
    cfg = GenSelectConfig(min_candidates=lo, max_candidates=hi, max_correct_fraction=frac)
    p = pool(spec)
    out = assemble(p, cfg, seed).to_pylist()
    correct = dict(zip(p.column("candidate_id").to_pylist(), p.column("correct").to_pylist()))
    per_problem = {}
    for r in out:
        flags = [correct[c] for c in r["candidate_ids"]]
        assert lo <= len(flags) <= hi and r["n_candidates"] == len(flags)
        assert 1 <= sum(flags) <= math.floor(frac * len(flags))
        assert r["correct_indices"] == [i for i, f in enumerate(flags) if f]
        assert all(c.startswith(r["problem_id"] + "/") for c in r["candidate_ids"])
        assert len(set(r["candidate_ids"])) == len(r["candidate_ids"])
        for i, cid in enumerate(r["candidate_ids"]):  # the prompt shows the candidates in label order
            assert f"### Candidate {i}\ncand {cid.split('/')[0]} {cid.split('/')[-1]} " in r["prompt"]
        per_problem.setdefault(r["problem_id"], []).append(frozenset(r["candidate_ids"]))
    for pid, sets in per_problem.items():
        assert len(sets) <= cfg.prompts_per_problem and len(set(sets)) == len(sets)  # no duplicates
    for pid, flags in spec.items():  # a problem gets prompts whenever one is possible
        if feasible_sizes(sum(flags), len(flags) - sum(flags), cfg):
            assert pid in per_problem


def test_same_seed_same_prompts_other_seed_other_prompts():
    p = pool({f"p{i}": [True, True, False, False, False, False, False, True] for i in range(5)})
    a, b = assemble(p, GenSelectConfig(), 1), assemble(p, GenSelectConfig(), 1)
    assert a.equals(b)
    assert not a.equals(assemble(p, GenSelectConfig(), 2))
    assert a.num_rows == 20  # 4 prompts for each of 5 problems


def test_over_long_prompts_are_dropped_and_real_counts_recorded():
    p = pool({"p": [True, False, False, False]}, text_len=3000)
    table = assemble(p, GenSelectConfig(max_tokens=2500), 0)
    out = table.to_pylist()
    assert out and all(r["n_tokens"] <= 2500 and r["n_candidates"] == 2 for r in out)
    assert int(table.schema.metadata[b"dropped_too_long"]) > 0  # summed into the stage's manifest
    assert all(r["token_counter"] == "estimate" for r in out)


def test_unreliable_verdicts_never_enter_a_prompt():
    p = pool({"p": [True, False, False, False]}, statuses={"p/t/1": "timeout", "p/t/2": "error"})
    out = assemble(p, GenSelectConfig(), 0).to_pylist()
    assert out and all(set(r["candidate_ids"]) <= {"p/t/0", "p/t/3"} for r in out)


def test_composition_check_fires():
    cfg = GenSelectConfig()
    with pytest.raises(AssertionError, match="no correct"):
        check_prompt([False, False], cfg)
    with pytest.raises(AssertionError, match="2 of 3 correct"):
        check_prompt([True, True, False], cfg)


def test_real_tokenizer_is_used_when_configured(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["cand x candidate solution question"] * 50, trainers.BpeTrainer(special_tokens=["[UNK]"]))
    tok.save(str(tmp_path / "tokenizer.json"))
    out = assemble(pool({"p": [True, False]}), GenSelectConfig(tokenizer=str(tmp_path)), 0).to_pylist()
    assert out[0]["token_counter"] == f"tokenizer:{tmp_path.name}"
    assert out[0]["n_tokens"] == len(tok.encode(out[0]["prompt"]).ids)


def test_template_must_have_slots(tmp_path):
    bad = tmp_path / "t.txt"
    bad.write_text("no slots here")
    with pytest.raises(ConfigError, match=r"genselect.template: .* has no \{question\} placeholder"):
        template_text(GenSelectConfig(template=str(bad)))
    assert "Judgment: <index>" in template_text(GenSelectConfig())


def test_over_long_candidates_never_enter_a_prompt_and_are_counted():
    """The seed recipe's cut: a response over max_candidate_tokens is left out before assembly (here the
    estimate counts ceil(bytes / 3) tokens: 3,300 bytes are 1,100 tokens)."""
    p = pool({"p": [True, False, False, False]})
    long_text = "x" * 3300
    p = p.set_column(4, "text", pa.array([long_text if i == 1 else t for i, t in enumerate(p["text"].to_pylist())]))
    table = assemble(p, GenSelectConfig(max_candidate_tokens=1000), 0)
    assert table.num_rows and all("p/t/1" not in r["candidate_ids"] for r in table.to_pylist())
    assert table.schema.metadata[b"candidates_too_long"] == b"1"  # summed into the stage's manifest
    unlimited = assemble(p, GenSelectConfig(max_candidate_tokens=None), 0)
    assert any("p/t/1" in r["candidate_ids"] for r in unlimited.to_pylist())
    assert unlimited.schema.metadata[b"candidates_too_long"] == b"0"
