"""The `transformers` engine: a local model directory on CPU or GPU, batched ``generate``.

Sampling is done by a logits processor that draws each row with its own ``torch.Generator`` seeded with
the sample's seed, so a sample depends on its seed, not on the random state other rows consumed. (A batch's
size and padding still move every row's logits by float rounding, so a token may flip where a draw falls near a
boundary; the same requests with the same batch size reproduce exactly, and with ``batch_size: 1``, which early
stopping requires, a sample is the same whatever else is asked.) Stop strings are applied to the decoded text.
A prompt that leaves less than ``max_tokens`` of the model window (``max_position_embeddings``) is skipped and
reported, as in the other engines.
"""

from __future__ import annotations

import time
from itertools import groupby

from bonforge.errors import ConfigError
from bonforge.llm.base import Completion, Progress, Request, fits, log_skipped, split_reasoning, truncate_at_stop
from bonforge.llm.config import TransformersTeacher
from bonforge.llm.prices import share_time


def _row_sampler(seeds: list[int], temperature: float, top_p: float):
    """A logits processor that samples each row with its own seeded generator and leaves only the drawn
    token finite, so generate's greedy step picks it."""
    import torch
    from transformers import LogitsProcessor

    class RowSampler(LogitsProcessor):
        def __init__(self):
            self.generators: list[torch.Generator] | None = None

        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            if self.generators is None:
                self.generators = [torch.Generator(device=scores.device).manual_seed(s) for s in seeds]
            probs = torch.softmax(scores.float() / temperature, dim=-1)
            if top_p < 1.0:
                sorted_p, order = probs.sort(dim=-1, descending=True)
                drop = sorted_p.cumsum(dim=-1) - sorted_p >= top_p  # keep the smallest prefix reaching top_p
                probs = probs.scatter(-1, order, sorted_p.masked_fill(drop, 0.0))
            picks = torch.stack([torch.multinomial(probs[r], 1, generator=g)
                                 for r, g in enumerate(self.generators)])
            out = torch.full_like(scores, float("-inf"))
            return out.scatter(-1, picks, 0.0)

    return RowSampler()


class TransformersEngine:
    name = "transformers"

    def __init__(self, teacher: TransformersTeacher):
        self.teacher = teacher
        self.model = self.tokenizer = None
        self.eos_ids: list[int] = []
        self.window = 0

    def start(self) -> None:
        """Load the tokenizer and the model onto the device; idempotent."""
        if self.model is not None:
            return
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from bonforge.llm.models import LOADING, resolve

        t = self.teacher
        try:
            path = resolve(t.model)
            dtype = "auto" if t.dtype == "auto" else getattr(torch, t.dtype)
            with LOADING:
                tok = AutoTokenizer.from_pretrained(path)
                model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        except OSError as e:
            raise ConfigError(f"teachers.{t.name}.model: cannot load a transformers model from {t.model}: "
                              f"{e}") from None
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        self.model, self.tokenizer = model.to(t.device).eval(), tok
        self.window = int(getattr(model.config, "max_position_embeddings", None) or 1 << 30)
        model_eos = model.generation_config.eos_token_id
        model_eos = model_eos if isinstance(model_eos, list) else [model_eos]
        self.eos_ids = sorted({i for i in [tok.eos_token_id, *model_eos] if i is not None})

    def prompt_text(self, request: Request) -> str:
        if request.messages is None:
            return request.prompt
        if not self.tokenizer.chat_template:
            raise ConfigError(f"teachers.{self.teacher.name}.model: {self.teacher.model} has no chat template; "
                              "add one to its tokenizer_config.json")
        # tokenize=False returns the rendered string (with tokenize=True, transformers 5 returns a dict)
        return self.tokenizer.apply_chat_template(list(request.messages), tokenize=False,
                                                 add_generation_prompt=not request.continue_final,
                                                 continue_final_message=request.continue_final)

    def generate(self, requests: list[Request], progress: Progress | None = None) -> list[list[Completion]]:
        self.start()
        texts = [self.prompt_text(r) for r in requests]
        keep = []
        for r, text in zip(requests, texts):
            length = len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            keep.append(fits(length, r.max_tokens, self.window))
            if not keep[-1]:
                log_skipped(self.name, r, length, self.window)
        jobs = [(r, i, text) for r, text, ok in zip(requests, texts, keep) if ok for i in range(r.n)]
        def params(job: tuple) -> tuple:
            return job[0].temperature, job[0].top_p, job[0].max_tokens

        # by the request itself, not its id: several requests of one problem (other sample indices) may come at once
        done: dict[tuple[int, int], Completion] = {}
        for key, group in groupby(sorted(jobs, key=params), key=params):
            group = list(group)
            for start in range(0, len(group), self.teacher.batch_size):
                batch = group[start: start + self.teacher.batch_size]
                for (r, i, _), c in zip(batch, self._batch(batch, *key)):
                    done[(id(r), i)] = c
                if progress is not None:
                    progress(len(done))
        return [[done[(id(r), i)] for i in range(r.n)] if ok else [] for r, ok in zip(requests, keep)]

    def _batch(self, jobs: list[tuple[Request, int, str]], temperature: float, top_p: float,
               max_tokens: int) -> list[Completion]:
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        tok, model = self.tokenizer, self.model
        enc = tok([p for _, _, p in jobs], return_tensors="pt", padding=True, add_special_tokens=False)
        enc = {k: v.to(model.device) for k, v in enc.items()}
        config = GenerationConfig(max_new_tokens=max_tokens, do_sample=False, pad_token_id=tok.pad_token_id,
                                  eos_token_id=self.eos_ids)
        processors = LogitsProcessorList()
        if temperature > 0:
            processors.append(_row_sampler([r.sample_seed(i) for r, i, _ in jobs], temperature, top_p))
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(**enc, generation_config=config, logits_processor=processors)
        latency = time.perf_counter() - t0
        width = enc["input_ids"].shape[1]
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        completions = []
        for row, (req, index, _) in enumerate(jobs):
            ids = out[row, width:].tolist()
            finish = "length"
            end = next((k for k, token in enumerate(ids) if token in self.eos_ids), None)
            if end is not None:
                ids, finish = ids[: end + 1], "stop"
            text, stop = truncate_at_stop(tok.decode(ids, skip_special_tokens=True), req.stop)
            reasoning, final = split_reasoning(text)
            completions.append(Completion(
                request_id=req.id, index=index, text=final, reasoning=reasoning,
                finish_reason="stop" if stop else finish, prompt_tokens=int(prompt_lens[row]),
                completion_tokens=len(ids), seed=req.sample_seed(index), engine=self.name,
                model=self.teacher.model, latency_s=latency, stop_reason=stop,
            ))
        return share_time(completions, latency)

    def close(self) -> None:
        self.model = self.tokenizer = None
