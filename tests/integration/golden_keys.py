"""Every stage key of the builds the integration tests run, pinned (the golden keys).

A key changes only through a deliberate version bump (or key-config change) in the stage's own module;
then update the pin here in the same commit. A key that changes as a side effect of a refactor fails here.
"""

from __future__ import annotations

GOLDEN: dict[str, dict[str, list[str]]] = {
    "gsm8k-genselect": {
        "problems": [
            "49e87bebb25f52fd1e98"
        ],
        "candidates": [
            "0ab33d7563063c7085fd",
            "332adf313d8e82b495dd",
            "4e04574542a530b4a44d",
            "8aee256314bcb6336386"
        ],
        "verdicts": [
            "a503dc1757da10c2cfc8",
            "66084e10b6c14a88f6e5",
            "54d490de1fc3ecdda41e",
            "c6ec5a3feb61ff763b33"
        ],
        "problem_stats": [
            "cc88070b022907fd2789"
        ],
        "genselect": [
            "1e088d5cd3df7e917c32"
        ]
    },
    "gsm8k-genselect-looser": {
        "problems": [
            "49e87bebb25f52fd1e98"
        ],
        "candidates": [
            "0ab33d7563063c7085fd",
            "332adf313d8e82b495dd",
            "4e04574542a530b4a44d",
            "8aee256314bcb6336386"
        ],
        "verdicts": [
            "a503dc1757da10c2cfc8",
            "66084e10b6c14a88f6e5",
            "54d490de1fc3ecdda41e",
            "c6ec5a3feb61ff763b33"
        ],
        "problem_stats": [
            "69628cca87c323a284e1"
        ],
        "genselect": [
            "a5a91c26b1133e850add"
        ]
    },
    "apps-genselect": {
        "problems": [
            "b2e64bf86b56d644c520"
        ],
        "candidates": [
            "80cbfc2569e163020596",
            "a2ab1e008f8d5a560b84"
        ],
        "verdicts": [
            "3a551d6f7fe93be4e666",
            "a4f7364aad43050d4a4e"
        ],
        "problem_stats": [
            "be0dc3d2684c3ba92494"
        ],
        "genselect": [
            "aeff069356e85e05c488"
        ]
    },
    "humaneval-genselect": {
        "problems": [
            "b933dc28fc6584c4428b"
        ],
        "candidates": [
            "8748e300c7beb3be7b0b",
            "4b813f5b61ea3f5d2659"
        ],
        "verdicts": [
            "f5348c12b080d780410c",
            "cd9bbd35b320fb6b6d05"
        ],
        "problem_stats": [
            "484ee0a29ab7efa51760"
        ],
        "genselect": [
            "d7930d9968cdac344f3a"
        ]
    },
    "gsm8k-fusion": {
        "problems": [
            "3ac9703ca25840d3f01b"
        ],
        "candidates": [
            "77ed76e3ba007ae6eb3c",
            "b5d9ffb74dc0cbc24c11",
            "8b3d49be83c94b74a953",
            "b3d87f57b99ee1c8ee05",
            "1d9125c4c9e96ed3afb2"
        ],
        "verdicts": [
            "7f2dc7b3dd8109c31998",
            "5d7f08a914c6879fa351",
            "67c8595826856a34f50d",
            "6075a18e12a0b2c33b9e",
            "e3d7d8b75dbc811e01a3"
        ],
        "problem_stats": [
            "2e3b974dbd2f2d5a4910"
        ],
        "genselect": [
            "093ef48232a4243f18fa"
        ],
        "fusion_pools": [
            "ae6352abaf477ec65426"
        ],
        "fusion_select": [
            "85b8bb7c0d17f38e537f"
        ],
        "fusion": [
            "97c9d5ed90d0dd33cc08"
        ]
    },
    "gsm8k-300-maxk": {
        "candidates": [
            "7896aa6a87654f5b4850",
            "1aed88d9b12ac148e46b",
            "8f1900f2a0a05d837564",
            "d3ffd9bba43de12f0693"
        ],
        "genselect": [
            "4477e553033731e7bd8a"
        ],
        "maxk_weights": [
            "7e7fdc28f96d6cd6be42"
        ],
        "problem_stats": [
            "76077fe5a7dccd2840de"
        ],
        "problems": [
            "ee22275cf9add79e218e"
        ],
        "verdicts": [
            "95fa91f02e5d73d6c5f6",
            "cf957110f48c7fbf6770",
            "e14a1f84a1e8dea7b3e8",
            "b8959723c8f0d3ebf304"
        ]
    },
    "sampled": {
        "candidates": [
            "4396f8c15d55be56328f"
        ],
        "genselect": [
            "6662674d273078d82faa"
        ],
        "problem_stats": [
            "35d2a197a0d157a271e5"
        ],
        "problems": [
            "109e835f8075a45556fb"
        ],
        "verdicts": [
            "ab468dcc07d6e7c561f7"
        ]
    },
    "gsm8k-300-selector-eval": {
        "candidates": [
            "7896aa6a87654f5b4850",
            "1aed88d9b12ac148e46b",
            "8f1900f2a0a05d837564",
            "d3ffd9bba43de12f0693"
        ],
        "genselect": [
            "4477e553033731e7bd8a"
        ],
        "problem_stats": [
            "76077fe5a7dccd2840de"
        ],
        "problems": [
            "ee22275cf9add79e218e"
        ],
        "selector_eval": [
            "472ae05f16b4a05e523d"
        ],
        "verdicts": [
            "95fa91f02e5d73d6c5f6",
            "cf957110f48c7fbf6770",
            "e14a1f84a1e8dea7b3e8",
            "b8959723c8f0d3ebf304"
        ]
    },
    "gsm8k-300-selector-eval-pool": {
        "candidates": [
            "7896aa6a87654f5b4850",
            "1aed88d9b12ac148e46b",
            "8f1900f2a0a05d837564",
            "d3ffd9bba43de12f0693"
        ],
        "genselect": [
            "4477e553033731e7bd8a"
        ],
        "problem_stats": [
            "76077fe5a7dccd2840de"
        ],
        "problems": [
            "ee22275cf9add79e218e"
        ],
        "selector_eval": [
            "580228155ed9bc933c71"
        ],
        "verdicts": [
            "95fa91f02e5d73d6c5f6",
            "cf957110f48c7fbf6770",
            "e14a1f84a1e8dea7b3e8",
            "b8959723c8f0d3ebf304"
        ]
    }
}


def assert_golden(name: str, record: dict) -> None:
    """``record["stages"]`` (stage -> keys in DAG order) is exactly the pinned one. After a deliberate
    version bump, ``BONFORGE_GOLDEN_UPDATE=FILE`` collects the new keys into FILE (JSON lines) instead,
    to be pasted here in the same commit."""
    import json
    import os

    if os.environ.get("BONFORGE_GOLDEN_UPDATE"):
        with open(os.environ["BONFORGE_GOLDEN_UPDATE"], "a") as f:
            f.write(json.dumps({name: record["stages"]}) + "\n")
        return
    assert record["stages"] == GOLDEN[name], f"stage keys of {name!r} changed; now: {json.dumps(record['stages'])}"
