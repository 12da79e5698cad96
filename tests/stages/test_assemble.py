import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bonforge.config import GenSelectConfig
from bonforge.errors import ConfigError
from bonforge.selection.prompts import template_text
from bonforge.stages.assemble import assemble, check_prompts, feasible_sizes


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
    for sets in per_problem.values():
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
        check_prompts(np.array([2, 2]), np.array([1, 0]), cfg)
    with pytest.raises(AssertionError, match="2 of 3 correct"):
        check_prompts(np.array([3]), np.array([2]), cfg)


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


# -- the vectorised stage against the per-row code it replaced (kept here as the reference) ----------------
def _reference_assemble(pool: pa.Table, cfg: GenSelectConfig, seed: int) -> pa.Table:
    """The per-problem, per-prompt Python loop of genselect version 1, as it was before vectorising."""
    import random

    from bonforge.schema import GENSELECT
    from bonforge.selection.prompts import UNRELIABLE, token_counter

    template = template_text(cfg)
    count, counter_name = token_counter(cfg)

    def render(question, texts):
        blocks = "\n\n".join(f"### Candidate {i}\n{t.strip()}" for i, t in enumerate(texts))
        return template.format(question=question.strip(), candidates=blocks, n=len(texts), last_index=len(texts) - 1)

    def prompts(pid, question, correct, wrong):
        sizes = feasible_sizes(len(correct), len(wrong), cfg)
        if not sizes:
            return [], 0
        by_m: dict[int, list[int]] = {}
        for m, c in sizes:
            by_m.setdefault(m, []).append(c)
        rng = random.Random(f"{seed}/{pid}")
        seen: set[frozenset] = set()
        rows, too_long = [], 0
        for _ in range(cfg.prompts_per_problem * 8):
            if len(rows) == cfg.prompts_per_problem:
                break
            m = rng.choice(sorted(by_m))
            c = rng.choice(by_m[m])
            chosen = [(cid, t, True) for cid, t in rng.sample(correct, c)]
            chosen += [(cid, t, False) for cid, t in rng.sample(wrong, m - c)]
            rng.shuffle(chosen)
            ids = frozenset(cid for cid, _, _ in chosen)
            if ids in seen:
                continue
            seen.add(ids)
            flags = [ok for _, _, ok in chosen]
            prompt = render(question, [t for _, t, _ in chosen])
            n_tokens = count(prompt)
            if n_tokens > cfg.max_tokens:
                too_long += 1
                continue
            idx = len(rows)
            rows.append({"prompt_id": f"{pid}#{idx}", "problem_id": pid, "prompt_index": idx,
                         "candidate_ids": [cid for cid, _, _ in chosen], "n_candidates": m,
                         "correct_indices": [i for i, ok in enumerate(flags) if ok], "prompt": prompt,
                         "n_tokens": n_tokens})
        return rows, too_long

    t = pool.sort_by([("problem_id", "ascending"), ("candidate_id", "ascending")])
    cols = {name: t.column(name).to_pylist() for name in
            ("problem_id", "question", "domain", "candidate_id", "text", "correct", "status")}
    rows: list[dict] = []
    too_long = candidates_too_long = 0
    lo, n = 0, t.num_rows
    while lo < n:
        pid = cols["problem_id"][lo]
        hi = lo
        while hi < n and cols["problem_id"][hi] == pid:
            hi += 1
        bad = UNRELIABLE.get(cols["domain"][lo], set())
        correct, wrong = [], []
        for i in range(lo, hi):
            text = cols["text"][i]
            if cols["status"][i] in bad or not text or not text.strip():
                continue
            if cfg.max_candidate_tokens is not None and count(text) > cfg.max_candidate_tokens:
                candidates_too_long += 1
                continue
            (correct if cols["correct"][i] else wrong).append((cols["candidate_id"][i], text))
        got, dropped = prompts(pid, cols["question"][lo], correct, wrong)
        rows.extend(got)
        too_long += dropped
        lo = hi
    for r in rows:
        r["token_counter"] = counter_name
    notes = {"dropped_too_long": str(too_long), "candidates_too_long": str(candidates_too_long)}
    return pa.Table.from_pylist(rows, schema=GENSELECT.with_metadata(notes))


def _random_pool(seed: int, problems: int) -> pa.Table:
    """Pools of 0-20 candidates per problem: texts of many lengths (some over the limits), empty or
    whitespace-only ones, non-ASCII letters and whitespace, unreliable verdicts, math and code."""
    import numpy as np

    rng = np.random.default_rng(seed)
    words = ["x = 3", "so", "Ωmega", "日本", "\u2003", "\x1c", "answer", "\t", "é", "{", "}", "12"]
    rows = []
    for p in range(problems):
        domain = "code" if p % 5 == 0 else "math"
        statuses = ["sandbox_error", "infra_error", "passed", "wrong_answer"] if domain == "code" else \
            ["timeout", "error", "correct", "wrong_answer", "no_answer"]
        for i in range(int(rng.integers(0, 21))):
            kind = rng.random()
            text = None if kind < 0.03 else " \n\u2003" if kind < 0.06 else \
                " ".join(rng.choice(words, int(rng.integers(1, 400 if kind > 0.9 else 40))))
            rows.append({"problem_id": f"p{p:03d}", "question": f" Q{p} {{n}} ünï\n", "domain": domain,
                         "candidate_id": f"p{p:03d}/t{i % 3}/{i:02d}", "text": text,
                         "correct": bool(rng.random() < 0.4),
                         "status": statuses[int(rng.integers(len(statuses)))] if rng.random() < 0.15 else "x"})
    order = rng.permutation(len(rows))  # the stage sorts its input
    return pa.Table.from_pylist([rows[i] for i in order], schema=pool({}).schema)


def _parquet_bytes(table: pa.Table) -> bytes:
    import io

    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd")
    return out.getvalue()


@pytest.mark.parametrize("cfg", [
    GenSelectConfig(),
    GenSelectConfig(max_tokens=700, max_candidate_tokens=300, prompts_per_problem=3),
    GenSelectConfig(min_candidates=3, max_candidates=8, max_correct_fraction=1.0, max_tokens=400),
])
@pytest.mark.parametrize("seed", [0, 5])
def test_vectorised_assembly_equals_the_per_row_loop(cfg, seed, monkeypatch):
    """Same rows, same bytes as the per-row loop, including the counts of what was dropped for length
    (the tight limits drop prompts mid-way, so later draws replace them); prompts rendered 50 at a time."""
    import bonforge.stages.assemble as stage

    monkeypatch.setattr(stage, "_RENDER", 50)
    p = _random_pool(seed + 11, 60)
    want, got = _reference_assemble(p, cfg, seed), assemble(p, cfg, seed)
    assert got.num_rows
    if cfg.max_tokens < 1000:
        assert int(want.schema.metadata[b"dropped_too_long"]) > 0
    if (cfg.max_candidate_tokens or 1000) < 1000:
        assert int(want.schema.metadata[b"candidates_too_long"]) > 0
    assert got.equals(want, check_metadata=True)
    assert _parquet_bytes(got) == _parquet_bytes(want)


def test_prompts_are_rendered_in_batches_bounded_in_bytes(monkeypatch):
    """Each rendering takes at most _RENDER_BYTES of candidate text (one prompt alone where it holds more):
    its memory follows the bytes of long candidates, not a count of prompts. Later rounds are gathered back
    into draw order a bounded run at a time; the rows and bytes are those of the per-row loop."""
    import bonforge.stages.assemble as stage

    bound, seen = 3000, []
    render = stage.render_many

    def counted(template, questions, texts):
        seen.append((len(questions), sum(len(t.encode()) for t in texts.flatten().to_pylist())))
        return render(template, questions, texts)

    monkeypatch.setattr(stage, "_RENDER_BYTES", bound, raising=False)  # the old code: fails below
    monkeypatch.setattr(stage, "render_many", counted)
    cfg = GenSelectConfig(max_tokens=700, max_candidate_tokens=300, prompts_per_problem=3)
    p = _random_pool(12, 60)
    got = assemble(p, cfg, 0)
    assert len(seen) > 10 and all(n == 1 or size <= bound for n, size in seen), seen
    assert any(n > 1 for n, _ in seen)
    want = _reference_assemble(p, cfg, 0)
    assert got.equals(want, check_metadata=True)
    assert _parquet_bytes(got) == _parquet_bytes(want)


def test_vectorised_assembly_equals_the_per_row_loop_with_a_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    words = ["x = 3 so answer 12 Candidate Problem"] * 50
    tok.train_from_iterator(words, trainers.BpeTrainer(special_tokens=["[UNK]"]))
    tok.save(str(tmp_path / "tokenizer.json"))
    cfg = GenSelectConfig(tokenizer=str(tmp_path / "tokenizer.json"), max_tokens=600, max_candidate_tokens=200)
    p = _random_pool(3, 40)
    want, got = _reference_assemble(p, cfg, 1), assemble(p, cfg, 1)
    assert got.num_rows and int(want.schema.metadata[b"dropped_too_long"]) > 0
    assert got.equals(want, check_metadata=True)
    assert _parquet_bytes(got) == _parquet_bytes(want)


def test_vectorised_assembly_of_nothing_equals_the_per_row_loop():
    p = pool({"p": [False, False], "q": [True]})
    want = _reference_assemble(p, GenSelectConfig(), 0)
    assert _parquet_bytes(assemble(p, GenSelectConfig(), 0)) == _parquet_bytes(want)


def test_template_placeholders_render_as_str_format_does(tmp_path):
    from bonforge.selection.prompts import render_all

    path = tmp_path / "t.txt"
    path.write_text("{{lit}} {n:>3}|{last_index!r}|{question}|{question:.3}\n{candidates}")
    template = template_text(GenSelectConfig(template=str(path)))
    texts = ["  a ", "b\u2003", "\x1cc"]
    want = template.format(question="Quest", n=3, last_index=2,
                           candidates="\n\n".join(f"### Candidate {i}\n{t.strip()}" for i, t in enumerate(texts)))
    assert render_all(template, [" Quest\n", "Q"], [texts, []]) == [want, template.format(
        question="Q", n=0, last_index=-1, candidates="")]


def test_unknown_template_placeholder_fails_when_the_template_is_read(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("{question} {candidates} {answer}")
    with pytest.raises(ConfigError, match=r"genselect.template: unknown placeholder \{answer\}"):
        template_text(GenSelectConfig(template=str(path)))


def test_texts_are_stripped_exactly_as_python_strips_them():
    """Every character Python counts as whitespace (and some it does not) at either end, in any mix."""
    import random

    from bonforge.stages.assemble import _strip

    chars = [" ", "\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\xa0", "\u1680", "\u2000",
             "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "a", "é", "日", "\x00", "\u200b", "\ufeff"]
    rng = random.Random(1)
    texts = ["".join(rng.choice(chars) for _ in range(rng.randint(0, 6))) for _ in range(20_000)] + [None]
    assert _strip(pa.array(texts)).to_pylist() == [t.strip() if t else "" for t in texts]


def test_a_code_verdict_without_a_label_never_enters_a_prompt():
    from bonforge.selection.prompts import UNRELIABLE

    assert UNRELIABLE["code"] == {"sandbox_error", "infra_error"}


def test_the_prompt_sizes_a_pool_allows_by_hand():
    """Written out by hand, not by the product's own rule: at most half correct, at least one, enough wrong."""
    cfg = GenSelectConfig()
    assert feasible_sizes(2, 2, cfg) == ((2, 1), (3, 1), (4, 2))
    assert feasible_sizes(1, 3, cfg) == ((2, 1), (3, 1), (4, 1))
    assert feasible_sizes(3, 1, cfg) == ((2, 1),)
    assert feasible_sizes(0, 5, cfg) == () and feasible_sizes(5, 0, cfg) == ()
    assert max(m for m, _ in feasible_sizes(8, 8, cfg)) == 16  # the largest size, max_candidates


def test_every_size_a_pool_allows_is_drawn_the_largest_included():
    """Over many problems of 2 correct and 2 wrong answers, prompts of each allowed size (2, 3 and 4, the whole
    pool) are drawn: a draw that never builds the largest size fails here."""
    p = pool({f"p{i:02d}": [True, False, True, False] for i in range(40)})
    sizes = {r["n_candidates"] for r in assemble(p, GenSelectConfig(), 0).to_pylist()}
    assert sizes == {2, 3, 4}
