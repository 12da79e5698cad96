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
            "b9e367c0fc207edb8597",
            "b456649d955c02aab654",
            "9d29e34346700d45bdff",
            "d8f21a17b3236396d8c2"
        ],
        "problem_stats": [
            "24cc5b29f4e04a8cf714"
        ],
        "genselect": [
            "86a1e12d00d544d1e22a"
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
            "b9e367c0fc207edb8597",
            "b456649d955c02aab654",
            "9d29e34346700d45bdff",
            "d8f21a17b3236396d8c2"
        ],
        "problem_stats": [
            "e4567e371ed8e7ed9feb"
        ],
        "genselect": [
            "8d73d5d2ea97138662ff"
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
            "405ec21fde525d4d6d04"
        ],
        "verdicts": [
            "7fde072c31996c86e684",
            "f8888284a56b9c03012c",
            "0fc2e63992ff8e50bcae",
            "42a7f67c387511570c3c",
            "91fec8f987fc33696d6b"
        ],
        "problem_stats": [
            "3f88790d441cb9bb588d"
        ],
        "genselect": [
            "ad8fd919e4446ffec314"
        ],
        "fusion_pools": [
            "d481df476e0f77717867"
        ],
        "fusion_select": [
            "477075e5f8c1d0ad0905"
        ],
        "fusion": [
            "36bdd184f1be44c0bb12"
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
            "91edd16d3ca6616d0c90"
        ],
        "maxk_weights": [
            "0009afc809fc83a46ccf"
        ],
        "problem_stats": [
            "ab84fe3406527953ce25"
        ],
        "problems": [
            "ee22275cf9add79e218e"
        ],
        "verdicts": [
            "46343f8e7ca1a3dbcc07",
            "ffede845ab47a7dab1a3",
            "af0f2a554c0f12393f2a",
            "ceb4d55166e3a451ce8d"
        ]
    },
    "sampled": {
        "candidates": [
            "4396f8c15d55be56328f"
        ],
        "genselect": [
            "34018bd4fd98fea555dc"
        ],
        "problem_stats": [
            "5a886a246591ebc9b867"
        ],
        "problems": [
            "109e835f8075a45556fb"
        ],
        "verdicts": [
            "b5657c382272fa55abe4"
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
            "91edd16d3ca6616d0c90"
        ],
        "problem_stats": [
            "ab84fe3406527953ce25"
        ],
        "problems": [
            "ee22275cf9add79e218e"
        ],
        "selector_eval": [
            "7c3cf6b67acc5f11beed"
        ],
        "verdicts": [
            "46343f8e7ca1a3dbcc07",
            "ffede845ab47a7dab1a3",
            "af0f2a554c0f12393f2a",
            "ceb4d55166e3a451ce8d"
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
            "91edd16d3ca6616d0c90"
        ],
        "problem_stats": [
            "ab84fe3406527953ce25"
        ],
        "problems": [
            "ee22275cf9add79e218e"
        ],
        "selector_eval": [
            "112caafd031bf1e9c602"
        ],
        "verdicts": [
            "46343f8e7ca1a3dbcc07",
            "ffede845ab47a7dab1a3",
            "af0f2a554c0f12393f2a",
            "ceb4d55166e3a451ce8d"
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
