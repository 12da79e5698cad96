"""The reward-model scorer on a real model: SmolLM2-135M-Instruct with a seeded random score head (a
stand-in for a trained reward model: its scores mean nothing, the code path is the real one). The
transformers engine equals a hand-written forward pass, batches equal single sequences, the conversation is
cut from the left and flagged, an untrained head is refused; the server engine (``/classify`` with token
ids) and vLLM offline give the same scores."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import bench_smoke
import pytest
from real_models import VLLMServer

from bonforge.scoring.config import RewardModelScorer
from bonforge.scoring import Item, ScorerError, open_scorer
from bonforge.scoring.reward_model import TEST_RM, TransformersRM, build_test_rm, load_tokenizer, render

ITEMS = [Item("What is the capital of France?", "Paris."),
         Item("What is the capital of France?", "The capital of France is Paris, on the Seine."),
         Item("Write a haiku about rain.", "Soft rain on the roof\nthe gutters hum a low song\nnight drinks it all in"),
         Item("Explain recursion briefly.", "A function that calls itself on a smaller input until a base case."),
         Item("2+2?", "5"), Item("2+2?", "4"),
         Item("Übersetze: good morning", "Guten Morgen!"),
         Item("Give me a long list.", " ".join(f"item {i}," for i in range(120)))]


@pytest.fixture(scope="module")
def rm_dir() -> str:
    if importlib.util.find_spec("gguf") is None:
        if os.environ.get("BONFORGE_REQUIRE_MODELS") == "1":
            pytest.fail("BONFORGE_REQUIRE_MODELS=1 but gguf is not installed (python -m bonforge.llm.cpu_models)")
        pytest.skip("gguf is not installed (python -m bonforge.llm.cpu_models)")
    return str(build_test_rm())


@pytest.fixture(scope="module")
def rm_server(rm_dir, tmp_path_factory):
    """vLLM's server on the test reward model (``VLLMServer``: its test waits for it with ``url()``)."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed (python -m bonforge.llm.cpu_models)")
    server = VLLMServer(["--model", rm_dir, "--served-model-name", "rm", "--dtype", "float32", "--max-model-len",
                         "1024", "--enforce-eager", "--gpu-memory-utilization", "0.2", "--runner", "pooling",
                         "--convert", "classify"], tmp_path_factory.mktemp("rm-server") / "vllm.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def local(rm_dir) -> list:
    """The transformers engine's results on ITEMS at the default batch of 8: what the other engines must equal
    (scored once for the module)."""
    return open_scorer(cfg(batch_size=8)).score(ITEMS)


def cfg(**kw) -> RewardModelScorer:
    return RewardModelScorer(**{"kind": "reward_model", "name": "rm", "model": TEST_RM, "allow_random_head": True,
                                "max_length": 1024, **kw})


@pytest.mark.slow
def test_transformers_engine_equals_a_plain_forward_pass_at_batch_1_and_8(rm_dir, local):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    heard: list[int] = []
    one, eight = open_scorer(cfg(batch_size=1)).score(ITEMS, heard.append), local
    assert heard == list(range(1, len(ITEMS) + 1))  # after each forward pass
    tok = AutoTokenizer.from_pretrained(rm_dir)
    model = AutoModelForSequenceClassification.from_pretrained(rm_dir, dtype=torch.float32).eval()
    for item, a, b in zip(ITEMS, one, eight):
        chat = [{"role": "user", "content": item.question}, {"role": "assistant", "content": item.text}]
        enc = tok(tok.apply_chat_template(chat, tokenize=False), add_special_tokens=False, return_tensors="pt")
        with torch.inference_mode():
            want = model(**enc).logits[0][0].item()
        assert a.value == pytest.approx(want, abs=1e-4) and b.value == pytest.approx(want, abs=1e-4)
        assert a.n_tokens == enc["input_ids"].shape[1] and a.truncated is False
    assert len({round(r.value, 3) for r in one}) == len(ITEMS)  # a real head: different texts, different scores


def test_long_conversations_are_cut_from_the_left_and_flagged(rm_dir):
    tok = load_tokenizer(TEST_RM)
    whole, cut = render(tok, ITEMS[-1].question, ITEMS[-1].text, 10_000)
    kept, was_cut = render(tok, ITEMS[-1].question, ITEMS[-1].text, 64)
    assert not cut and was_cut and kept == whole[-64:]  # the end of the answer stays
    got = open_scorer(cfg(max_length=64)).score([ITEMS[-1], ITEMS[0]])
    assert (got[0].n_tokens, got[0].truncated) == (64, True) and got[1].truncated is False


def test_an_untrained_head_is_refused_unless_allowed(rm_dir):
    with pytest.raises(ScorerError, match="score head is not trained"):
        TransformersRM(cfg(allow_random_head=False))


class _Classify(BaseHTTPRequestHandler):
    """A stand-in for a served reward model: vLLM 0.32's `/classify` shape, computed by the transformers
    engine on the token ids it receives."""

    engine: TransformersRM
    bodies: list

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        if self.path != "/classify" or body.get("use_activation") is not False:
            self.send_response(400)
            self.end_headers()
            return
        values = type(self).engine(body["input"])
        data = [{"index": i, "label": "LABEL_0", "probs": [v], "num_classes": 1} for i, v in enumerate(values)]
        out = json.dumps({"id": "classify-1", "object": "list", "created": 0, "model": body["model"],
                          "data": data[::-1], "usage": {"prompt_tokens": 0, "total_tokens": 0}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *_):
        pass


@pytest.mark.slow
def test_server_engine_sends_token_ids_and_reads_raw_logits(rm_dir, local):
    _Classify.engine, _Classify.bodies = TransformersRM(cfg(batch_size=8)), []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Classify)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        heard: list[int] = []
        got = open_scorer(cfg(engine="pooling", base_url=url, served_model="rm", batch_size=3)).score(
            ITEMS + [Item("?", None)], heard.append)[:-1]
    finally:
        server.shutdown()
    assert heard == [4, 7, 9]  # after each request (the item without text counted at once)
    assert [g.value for g in got] == pytest.approx([v.value for v in local], abs=1e-5)
    assert len(_Classify.bodies) == 3 and all(isinstance(b["input"][0][0], int) for b in _Classify.bodies)
    tok = load_tokenizer(TEST_RM)
    assert _Classify.bodies[0]["input"][0] == render(tok, ITEMS[0].question, ITEMS[0].text, 1024)[0]


def test_a_server_that_fails_is_the_scorers_error_not_a_score(rm_dir):
    with pytest.raises(ScorerError, match="reward model server"):
        open_scorer(cfg(engine="pooling", base_url="http://127.0.0.1:9", timeout_s=2)).score(ITEMS[:1])


@pytest.mark.slow
def test_vllm_offline_gives_the_same_scores(rm_dir, local, tmp_path):
    """vLLM offline, in a process of its own as ``benchmarks/reward_model.py`` runs it: the test is that script's
    smoke run (``bench_smoke``) on these conversations, so that CI loads the model in vLLM once for both."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed (python -m bonforge.llm.cpu_models)")
    (tmp_path / "items.json").write_text(json.dumps([i.__dict__ for i in ITEMS]))
    script = [sys.executable, str(bench_smoke.BENCHMARKS / "reward_model.py"), *bench_smoke.argv("reward_model",
                                                                                                 tmp_path)]
    done = subprocess.run(script, capture_output=True, text=True, timeout=600, cwd=bench_smoke.REPO,
                          env={**os.environ, "VLLM_CPU_OMP_THREADS_BIND": "nobind"})
    assert done.returncode == 0 and bench_smoke.unprinted("reward_model", done.stdout) == [], done.stderr[-3000:]
    assert json.loads((tmp_path / "scores.json").read_text())["vllm"] == pytest.approx([r.value for r in local],
                                                                                       abs=1e-4)


@pytest.mark.slow
def test_a_real_vllm_server_gives_the_same_scores(rm_server, local):
    """vLLM's own OpenAI-compatible server (pooling runner, the model converted to classify) behind the
    `pooling` engine: the same token ids, the raw logits, within 1e-4 of transformers (measured here on the
    CPU build: 1.1e-5 over these eight conversations; the bound leaves room for other CPUs' float order)."""
    got = open_scorer(cfg(engine="pooling", base_url=rm_server.url(), served_model="rm", batch_size=3)).score(ITEMS)
    assert all(g.status == "ok" and g.n_tokens == v.n_tokens for g, v in zip(got, local))
    assert [g.value for g in got] == pytest.approx([v.value for v in local], abs=1e-4)
