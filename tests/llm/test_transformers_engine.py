"""The transformers engine on a tiny Qwen2 model with random weights and a BPE tokenizer trained here:
the real generate path runs, seeds reproduce samples, different seeds differ, the stage writes them."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from bonforge.llm.base import Request  # noqa: E402
from bonforge.llm.config import TransformersTeacher  # noqa: E402
from bonforge.llm.transformers_engine import TransformersEngine  # noqa: E402
from bonforge.schema import PROBLEMS  # noqa: E402
from bonforge.storage.store import StageStore  # noqa: E402
from bonforge.stages.sample import key_config  # noqa: E402
from sampling import sample_stage  # noqa: E402

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    root = tmp_path_factory.mktemp("tiny-qwen2")
    corpus = [f"Question {i}: what is {i} plus {i * 3}? The answer is {i * 4}. Think step by step." for i in range(300)]
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    from tokenizers import decoders

    bpe.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>")
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(root)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    Qwen2ForCausalLM(config).save_pretrained(root)
    return str(root)


def teacher(model: str, **kw) -> TransformersTeacher:
    base = dict(engine="transformers", name="tiny", model=model, n=3, temperature=1.0, top_p=0.95,
                max_tokens=12, batch_size=4)
    return TransformersTeacher(**{**base, **kw})


def req(i: int, seed: int, n: int = 3) -> Request:
    return Request(id=f"p{i}", messages=({"role": "user", "content": f"what is {i} plus {i}?"},), n=n,
                   temperature=1.0, top_p=0.95, max_tokens=12, seed=seed)


def test_generate_reproduces_with_same_seeds(tiny_model):
    engine = TransformersEngine(teacher(tiny_model))
    t0 = time.perf_counter()
    first = engine.generate([req(1, 10), req(2, 20)])
    elapsed = time.perf_counter() - t0
    again = engine.generate([req(1, 10), req(2, 20)])
    other = engine.generate([req(1, 99), req(2, 98)])
    texts = lambda out: [c.text for cs in out for c in cs]  # noqa: E731
    assert texts(first) == texts(again)
    assert texts(first) != texts(other)
    assert len(set(texts(first))) > 1  # distinct seeds per sample
    c = first[0][1]
    assert (c.request_id, c.index, c.seed, c.engine) == ("p1", 1, 11, "transformers")
    assert c.prompt_tokens > 0 and 1 <= c.completion_tokens <= 12 and c.finish_reason in ("stop", "length")
    tokens = sum(c.completion_tokens for cs in first for c in cs)
    print(f"transformers CPU: {tokens} tokens in {elapsed:.2f}s ({tokens / elapsed:.0f} tokens/s)")


def test_one_sample_regenerates_alone_with_its_seed(tiny_model):
    engine = TransformersEngine(teacher(tiny_model, batch_size=1))
    batch = engine.generate([req(3, 40, n=3)])[0]
    alone = engine.generate([Request(id="p3", messages=req(3, 0).messages, n=1, temperature=1.0, top_p=0.95,
                                     max_tokens=12, seed=batch[2].seed)])[0][0]
    assert alone.text == batch[2].text


def test_requests_of_one_problem_in_one_call_each_get_their_own_samples(tiny_model):
    """Early stopping asks a request per sample, and a stage resumed asks one per run of missing indices: several
    requests of one problem may come in one call. Control: each as asked alone."""
    engine = TransformersEngine(teacher(tiny_model, batch_size=4))
    seeds = (40, 41, 43)
    together = engine.generate([req(3, s, n=1) for s in seeds])
    alone = [engine.generate([req(3, s, n=1)])[0][0] for s in seeds]
    assert [(cs[0].seed, cs[0].text) for cs in together] == [(c.seed, c.text) for c in alone]
    assert len({c.seed for cs in together for c in cs}) == 3


def test_progress_counts_each_batch_as_it_is_done(tiny_model):
    heard: list[int] = []
    TransformersEngine(teacher(tiny_model, batch_size=2)).generate([req(1, 10), req(2, 20)], heard.append)
    assert heard == [2, 4, 6]  # six samples, two at a time


def test_greedy_and_raw_prompt(tiny_model):
    engine = TransformersEngine(teacher(tiny_model))
    a = engine.generate([Request(id="g", prompt="Question 5: what is", n=2, temperature=0.0, max_tokens=8, seed=1)])
    assert a[0][0].text == a[0][1].text  # greedy ignores seeds


def test_sampling_stage_with_transformers(tiny_model, tmp_path):
    rows = [{"problem_id": f"t/{i}", "source": "t", "domain": "math", "question": f"what is {i} plus {i}?",
             "answer": str(2 * i), "tests": None, "metadata": None} for i in range(5)]
    store = StageStore(tmp_path)
    t = teacher(tiny_model, n=2, shard_problems=2)
    man = sample_stage(store, pa.Table.from_pylist(rows, schema=PROBLEMS), t)
    table = store.read("candidates", man["key"])
    assert man["rows"] == 10 and len(man["files"]) == 3
    assert sorted(table.column("candidate_id").to_pylist())[:2] == ["t/0/tiny/0", "t/0/tiny/1"]
    assert man["tokens"]["completion"] == sum(table.column("completion_tokens").to_pylist()) > 0
    assert man["throughput"]["completion_tokens_per_s"] > 0
    # execution-only settings leave the key alone; the weights are part of the model identity
    assert key_config(teacher(tiny_model, n=2, batch_size=1, device="cpu", shard_problems=5)) == man["config"]


def test_a_prompt_over_the_window_is_skipped_and_reported(tiny_model, caplog):
    engine = TransformersEngine(teacher(tiny_model))
    long = Request(id="long", messages=({"role": "user", "content": "what is 1 plus 1? " * 60},), n=2,
                   temperature=1.0, max_tokens=12, seed=0)
    with caplog.at_level("WARNING", logger="bonforge"):
        out = engine.generate([req(1, 10), long, req(2, 20)])
    assert [len(cs) for cs in out] == [3, 0, 3]  # the window of the tiny model is 256 tokens
    assert "transformers: request long skipped: prompt of" in caplog.text
    assert "exceeds the model window 256" in caplog.text


def test_models_loading_on_threads_at_once_each_get_their_weights(tiny_model):
    """Stages of a streaming build load their models on threads of their own: transformers loads under
    accelerate's ``init_empty_weights``, which patches torch for the whole process, so a model loaded on
    another thread meanwhile got meta tensors ("Cannot copy out of meta tensor"). Loads take turns."""
    engines = [TransformersEngine(teacher(tiny_model)) for _ in range(6)]
    start, errors = threading.Barrier(len(engines)), []

    def load(engine: TransformersEngine) -> None:
        start.wait()
        try:
            engine.start()
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=load, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    weights = [e.model.get_input_embeddings().weight for e in engines]
    assert all(w.device.type == "cpu" and torch.equal(w, weights[0]) for w in weights)
