"""A sequence-classification reward model: score = the raw logit of ``label_index`` (no sigmoid).

bonforge renders each conversation (the request as the user turn, the answer as the assistant turn, no
generation prompt) with the model's own chat template, tokenizes the rendered text once without adding
special tokens (the template writes them: adding them again doubles the BOS of Llama-style templates), and
keeps the last ``max_length`` tokens (cut from the left, so the end of the answer, where the score is read,
stays; flagged ``truncated``). The same token ids go to every engine:

* ``transformers``: the local directory, batches left-padded with explicit position ids; the score is the
  head's output at the last position, read by a hook on the head (transformers' own pooling looks for the
  rightmost token that is not the pad token, which moves when pad = eos and the template ends with it);
* ``vllm``: offline, ``runner="pooling"``, ``classify`` on ``TokensPrompt`` with ``use_activation=False``
  (vLLM's default for one label is a sigmoid);
* ``pooling``: an OpenAI-compatible server's ``/classify`` with ``input`` = the token id lists and
  ``use_activation: false`` (vLLM 0.32's shape: ``data[i].probs``).

A head missing from the weights (transformers initialises it at random and only warns) is an error unless
``allow_random_head`` says this is a test model."""

from __future__ import annotations

import json
from pathlib import Path

from bonforge.llm import models
from bonforge.scoring.base import Item, Progress, Result, ScorerError

VERSION = "1"
VLLM_PIECE = 128  # conversations per vLLM classify call (vLLM batches them itself; progress moves between)
HEADS = ("score", "classifier")  # the head's attribute in transformers' sequence-classification models


TEST_RM = "smollm2-135m-instruct-rm"  # SmolLM2 with a seeded random score head: a stand-in, its scores mean nothing
_TEST_BASE, _TEST_SEED, _TEST_BUILD = "smollm2-135m-instruct", 0, "1"
RANDOM_HEAD = "bonforge_random_head"  # the config flag of a model whose head is random on purpose


def model_identity(cfg) -> dict:
    if cfg.model == TEST_RM:
        return {"model": {"name": TEST_RM, "base": models.identity(_TEST_BASE), "seed": _TEST_SEED,
                          "build": _TEST_BUILD}}
    return {"model": models.model_identity(cfg.model, None)}


def resolve(model: str) -> str:
    """The local directory of ``model``: the test reward model built on first use, a known name prepared."""
    return str(build_test_rm()) if model == TEST_RM else models.resolve(model)


def build_test_rm() -> Path:
    """The test reward model: SmolLM2-135M-Instruct as a sequence classifier (one label) whose score head is
    drawn with a fixed seed, its pad token one that never ends a conversation; cached like the models it is
    built from, and marked in its config as having a random head."""
    import fcntl

    out = models.cache_dir() / f"{TEST_RM}-{models.KNOWN[_TEST_BASE].sha256[:12]}-b{_TEST_BUILD}"
    if (out / "config.json").is_file():
        return out
    base = models.prepare(_TEST_BASE)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (out / "config.json").is_file():
            return out
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(base)
        model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1, dtype=torch.float32)
        gen = torch.Generator().manual_seed(_TEST_SEED)
        with torch.no_grad():
            head = torch.randn(model.score.weight.shape, generator=gen) / model.config.hidden_size ** 0.5
            model.score.weight.copy_(head)
        pad = tok.convert_tokens_to_ids("<|endoftext|>")
        model.config.pad_token_id = tok.pad_token_id = pad if pad is not None else 0
        setattr(model.config, RANDOM_HEAD, True)
        models.save_model(model, tok, out)
    return out


def load_tokenizer(model: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve(model))
    if not getattr(tok, "chat_template", None):
        raise ScorerError(f"reward model {model!r}: its tokenizer has no chat template")
    return tok


def render(tok, question: str, answer: str, max_length: int) -> tuple[list[int], bool]:
    """The token ids of the conversation (last ``max_length`` of them) and whether it was cut."""
    chat = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    text = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=False)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    return (ids[-max_length:], True) if len(ids) > max_length else (ids, False)


class TransformersRM:
    def __init__(self, cfg) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification

        self.torch = torch
        root = resolve(cfg.model)
        if not Path(root, "config.json").is_file():
            raise ScorerError(f"reward model {cfg.model!r}: engine transformers needs a local model directory")
        model, info = AutoModelForSequenceClassification.from_pretrained(
            root, dtype=getattr(torch, cfg.dtype), output_loading_info=True)
        head = next((h for h in HEADS if hasattr(model, h)), None)
        if head is None:
            raise ScorerError(f"reward model {cfg.model!r}: no score head ({' or '.join(HEADS)}) in "
                              f"{type(model).__name__}")
        missing = [k for k in info.get("missing_keys", []) if k.split(".")[0] == head]
        if getattr(model.config, RANDOM_HEAD, False):
            missing.append(f"{head} (drawn at random by bonforge: a test model)")
        if missing and not cfg.allow_random_head:
            raise ScorerError(f"reward model {cfg.model!r}: its score head is not trained ({', '.join(missing)}): "
                              "its scores would mean nothing (allow_random_head: true for a test model)")
        if model.config.pad_token_id is None:  # transformers refuses batches > 1 without one (its pooling only)
            model.config.pad_token_id = 0
        self.model = model.eval()
        self.label = cfg.label_index
        self.batch_size = cfg.batch_size
        self.captured = []
        getattr(model, head).register_forward_hook(lambda _m, _i, out: self.captured.append(out))

    def __call__(self, batch: list[list[int]], progress: Progress | None = None) -> list[float]:
        return in_pieces(self._forward, batch, self.batch_size, progress)

    def _forward(self, seqs: list[list[int]]) -> list[float]:
        torch = self.torch
        width = max(len(s) for s in seqs)
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, s in enumerate(seqs):  # left-padded: every sequence ends at the last position
            ids[row, width - len(s):] = torch.tensor(s)
            mask[row, width - len(s):] = 1
        self.captured.clear()
        with torch.inference_mode():
            if self._per_position():
                self.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0))
                logits = self.captured[-1][:, -1, :]
            else:  # a head over a pooled state (BERT-style): one sequence per forward, unpadded
                logits = torch.cat([self._single(s) for s in seqs])
        return logits[:, self.label].float().tolist()

    def _per_position(self) -> bool:
        return getattr(self.model.config, "model_type", "") not in ("bert", "roberta", "xlm-roberta", "deberta-v2")

    def _single(self, seq: list[int]):
        self.captured.clear()
        self.model(input_ids=self.torch.tensor([seq]))
        return self.captured[-1].reshape(1, -1)

    def close(self) -> None:
        self.model = None


class VLLMRM:
    def __init__(self, cfg) -> None:
        try:
            import torch
            from vllm import LLM
        except ImportError:
            raise ScorerError("reward model engine vllm: vLLM is not installed") from None
        cpu = not torch.cuda.is_available()
        args = dict(model=resolve(cfg.model), runner="pooling", convert="classify", dtype=cfg.dtype,
                    max_model_len=cfg.max_length, enforce_eager=cpu, gpu_memory_utilization=0.2 if cpu else 0.9)
        if cpu:
            args.update(enable_chunked_prefill=False, max_num_batched_tokens=max(cfg.max_length, 2048))
        self.llm = LLM(**args)
        self.label = cfg.label_index

    def __call__(self, batch: list[list[int]], progress: Progress | None = None) -> list[float]:
        return in_pieces(self._classify, batch, VLLM_PIECE, progress)

    def _classify(self, seqs: list[list[int]]) -> list[float]:
        from vllm.inputs import TokensPrompt
        from vllm.pooling_params import PoolingParams

        outs = self.llm.classify([TokensPrompt(prompt_token_ids=ids) for ids in seqs],
                                 pooling_params=PoolingParams(use_activation=False), use_tqdm=False)
        return [float(o.outputs.probs[self.label]) for o in outs]

    def close(self) -> None:
        self.llm = None


class PoolingRM:
    """A served model's ``/classify`` endpoint, token ids in, raw logits out."""

    def __init__(self, cfg) -> None:
        import httpx

        self.url = cfg.base_url.rstrip("/").removesuffix("/v1") + "/classify"
        self.model = cfg.served_model or cfg.model
        self.label = cfg.label_index
        self.batch_size = cfg.batch_size
        self.client = httpx.Client(timeout=cfg.timeout_s)

    def __call__(self, batch: list[list[int]], progress: Progress | None = None) -> list[float]:
        return in_pieces(self._post, batch, self.batch_size, progress)

    def _post(self, part: list[list[int]]) -> list[float]:
        body = {"model": self.model, "input": part, "use_activation": False}
        try:
            resp = self.client.post(self.url, json=body)
            resp.raise_for_status()
            data = sorted(resp.json()["data"], key=lambda d: d["index"])
            values = [float(d["probs"][self.label]) for d in data]
        except Exception as e:  # the server's failure, never a candidate's score
            raise ScorerError(f"reward model server {self.url}: {type(e).__name__}: {str(e)[:300]}") from None
        if len(values) != len(part):
            raise ScorerError(f"reward model server {self.url}: {len(values)} scores for {len(part)} inputs")
        return values

    def close(self) -> None:
        self.client.close()


def in_pieces(run, batch: list[list[int]], size: int, progress: Progress | None) -> list[float]:
    """``run`` over ``batch`` ``size`` sequences at a time, telling ``progress`` the sequences done after each."""
    out: list[float] = []
    for i in range(0, len(batch), size):
        out += run(batch[i:i + size])
        if progress is not None:
            progress(len(out))
    return out


ENGINES = {"transformers": TransformersRM, "vllm": VLLMRM, "pooling": PoolingRM}


class RewardModel:
    def __init__(self, cfg) -> None:
        self.cfg = cfg
        self.tok = load_tokenizer(cfg.model)
        self.engine = ENGINES[cfg.engine](cfg)

    def score(self, items: list[Item], progress: Progress | None = None) -> list[Result]:
        """``progress``: told after each forward pass / request (items without text count as scored at once)."""
        out: list[Result | None] = [None] * len(items)
        todo, batch = [], []
        for i, item in enumerate(items):
            if item.text is None:
                out[i] = Result(None, "no_text")
                continue
            ids, cut = render(self.tok, item.question, item.text, self.cfg.max_length)
            todo.append((i, len(ids), cut))
            batch.append(ids)
        ready = len(items) - len(batch)
        values = self.engine(batch, None if progress is None else lambda k: progress(ready + k)) if batch else []
        for (i, n, cut), v in zip(todo, values):
            out[i] = Result(v, n_tokens=n, truncated=cut, detail=None if not cut else json.dumps({"cut_from": "left"}))
        return out  # type: ignore[return-value]

    def close(self) -> None:
        self.engine.close()


def open_scorer(cfg) -> RewardModel:
    return RewardModel(cfg)
