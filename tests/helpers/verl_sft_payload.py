"""Runs inside the verl venv (``.ci/verl-venv``), driven by ``test_tool_build.py``: verl's own multi-turn SFT
dataset reads an SFT export of ours.

``python verl_sft_payload.py TOKENIZER TRAIN_FILE`` prints one JSON line: the rows verl read and, per row, the
tokens it trains on (the loss mask) and the roles of its messages.
"""

from __future__ import annotations

import json
import sys

import verl
from verl.utils import hf_tokenizer
from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset


def main() -> None:
    tokenizer = hf_tokenizer(sys.argv[1])
    dataset = MultiTurnSFTDataset(parquet_files=sys.argv[2], tokenizer=tokenizer,
                                  config={"messages_key": "messages", "max_length": 4096, "truncation": "error"})
    rows = []
    for i in range(len(dataset)):
        item = dataset[i]
        rows.append({"trained": int(item["loss_mask"].sum()), "tokens": int(item["attention_mask"].sum()),
                     "roles": [m["role"] for m in dataset.messages[i]]})
    print(json.dumps({"rows": rows, "verl": verl.__version__}))


if __name__ == "__main__":
    main()
