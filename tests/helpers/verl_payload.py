"""Runs inside the verl venv (``.ci/verl-venv``), driven by ``test_trainers.py``: verl's own config,
dataset and reward loading score given responses, nothing of ours but the reward named by the overrides.

``python verl_payload.py CASES.json`` where the file holds ``{"tokenizer": DIR, "cases": [{"overrides":
[...], "train_file": PATH, "responses": [[row, text], ...]}]}``; prints one JSON line: per case, the
list of ``{"reward_score", "reward_extra_info"}`` (or ``{"error": ...}``), and the versions used.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import transformers
import verl
from hydra import compose, initialize_config_dir
from verl import DataProto
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker, migrate_legacy_reward_impl
from verl.utils import hf_tokenizer
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def trainer_config(overrides: list[str]):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return migrate_legacy_reward_impl(compose("ppo_trainer", overrides=overrides))


def pad(rows: list[list[int]], value: int, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = [([value] * (width - len(r)) + r) if left else (r + [value] * (width - len(r))) for r in rows]
    mask = [([0] * (width - len(r)) + [1] * len(r)) if left else ([1] * len(r) + [0] * (width - len(r))) for r in rows]
    return torch.tensor(ids), torch.tensor(mask)


def rollout_batch(dataset: RLHFDataset, tokenizer, responses: list[list]) -> DataProto:
    """What verl's agent loop hands the reward loop: the dataset's rows, with prompt and response tokens."""
    items = [dataset[row] for row, _ in responses]
    prompts = [tokenizer.apply_chat_template(list(it["raw_prompt"]), add_generation_prompt=True, tokenize=True,
                                             return_dict=False) for it in items]  # fmt: skip
    eos = [tokenizer.eos_token_id]
    answers = [tokenizer(text, add_special_tokens=False)["input_ids"] + eos for _, text in responses]
    prompt_ids, prompt_mask = pad(prompts, tokenizer.pad_token_id, left=True)
    response_ids, response_mask = pad(answers, tokenizer.pad_token_id, left=False)
    data = collate_fn(items)
    data.update(prompts=prompt_ids, responses=response_ids, input_ids=torch.cat([prompt_ids, response_ids], 1),
                attention_mask=torch.cat([prompt_mask, response_mask], 1))
    return DataProto.from_single_dict(data)


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    results = []
    for case in spec["cases"]:
        overrides = case["overrides"] + [
            f"actor_rollout_ref.model.path={spec['tokenizer']}", f"data.train_files={case['train_file']}"]
        config = trainer_config(overrides)
        tokenizer = hf_tokenizer(spec["tokenizer"])
        dataset = RLHFDataset(data_files=[case["train_file"]], tokenizer=tokenizer, config=config.data)
        worker = RewardLoopWorker(config)
        data = rollout_batch(dataset, tokenizer, case["responses"])
        try:
            out = worker.loop.run_until_complete(worker.compute_score_batch(data))
        except Exception as e:  # the control case: verl without our reward
            out = {"error": f"{type(e).__name__}: {e}"}
        results.append({"rows": len(dataset), "scores": out})
    versions = {"verl": verl.__version__, "transformers": transformers.__version__, "torch": torch.__version__}
    print(json.dumps({"results": results, "versions": versions}, default=str))


if __name__ == "__main__":
    main()
