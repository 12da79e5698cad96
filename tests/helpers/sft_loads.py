"""What the tests of SFT exports share: TRL's SFTTrainer takes one step on a ``messages`` file, and verl's
multi-turn SFT dataset (in verl's own venv, ``.ci/verl-venv``) reads one (``verl_sft_payload.py``)."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

HELPERS = Path(__file__).resolve().parent


def trl_sft_step(path: Path, model: str, out: Path) -> str:
    """One SFTTrainer step on CPU over ``path`` with the tiny LM ``model``; returns the first row as the model's
    chat template renders it (what the step trained on)."""
    import datasets
    from trl import SFTConfig, SFTTrainer

    ds = datasets.load_dataset("parquet", data_files=str(path), split="train")
    args = SFTConfig(output_dir=str(out), use_cpu=True, bf16=False, per_device_train_batch_size=2, max_steps=1,
                     logging_steps=1, max_length=1024, report_to=[], save_strategy="no", seed=0,
                     assistant_only_loss=False)  # fmt: skip
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds)
    text = trainer.processing_class.apply_chat_template(ds[0]["messages"], tokenize=False)
    result = trainer.train()
    assert trainer.state.global_step == 1 and math.isfinite(result.training_loss) and result.training_loss > 0
    return text


def verl_multiturn_rows(verl_python: str, model: str, path: Path, cwd: Path) -> list[dict]:
    """The rows verl 0.9.1's MultiTurnSFTDataset read from ``path`` with ``model``'s tokenizer: per row the roles
    of its messages, its tokens and the tokens it trains on (the loss mask)."""
    env = {**os.environ, "PYTHONPATH": str(HELPERS.parents[1])}
    done = subprocess.run([verl_python, str(HELPERS / "verl_sft_payload.py"), model, str(path)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=cwd)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["verl"] == "0.9.1"
    return out["rows"]
