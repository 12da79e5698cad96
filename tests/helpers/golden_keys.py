"""Every stage key of the builds the integration tests run, pinned (the golden keys).

A key changes only through a deliberate version bump (or key-config change) in the stage's own module;
then update the pin here in the same commit. A key that changes as a side effect of a refactor fails here.
"""

from __future__ import annotations

GOLDEN: dict[str, dict[str, list[str]]] = {
    "gsm8k-genselect": {
        "problems": [
            "9f0c79233233ffd15f29"
        ],
        "candidates": [
            "89dd663feb909e8e1e9d",
            "e182902b6b9c5b2fe5fd",
            "0b379730130ebf39d369",
            "f592476a65930446eb96"
        ],
        "verdicts": [
            "3da3ad737e460b9cfe65",
            "61339a6ee5e10d6fecea",
            "6f1c3fb5dbe8c0af26a7",
            "db49c3056a813a721e6c"
        ],
        "problem_stats": [
            "1a5bf3a9c10715e83fd0"
        ],
        "genselect": [
            "0d87dbe93fd87b6df039"
        ]
    },
    "gsm8k-genselect-looser": {
        "problems": [
            "9f0c79233233ffd15f29"
        ],
        "candidates": [
            "89dd663feb909e8e1e9d",
            "e182902b6b9c5b2fe5fd",
            "0b379730130ebf39d369",
            "f592476a65930446eb96"
        ],
        "verdicts": [
            "3da3ad737e460b9cfe65",
            "61339a6ee5e10d6fecea",
            "6f1c3fb5dbe8c0af26a7",
            "db49c3056a813a721e6c"
        ],
        "problem_stats": [
            "aff844689b8576cf587f"
        ],
        "genselect": [
            "d1291c803e4ff5d8025a"
        ]
    },
    "apps-genselect": {
        "problems": [
            "b5b1c546a4cd55c23d8f"
        ],
        "candidates": [
            "9751180c6ec0a8fca3db",
            "e4cca685f3e8ea26cf50"
        ],
        "verdicts": [
            "12cf322713fe923ea507",
            "ef713f44d544903ff5e8"
        ],
        "problem_stats": [
            "626d32fdbc63373ccba5"
        ],
        "genselect": [
            "f0e2141726e9c4696320"
        ]
    },
    "humaneval-genselect": {
        "problems": [
            "38ebd970ff3bfea8c4a6"
        ],
        "candidates": [
            "15919391f08fe6e1d221",
            "9a8aa9e6cc0e3ab70c26"
        ],
        "verdicts": [
            "a78df9950bf8894231fc",
            "a9676eb581b962caf52b"
        ],
        "problem_stats": [
            "8661e9b3b9fb62c9a253"
        ],
        "genselect": [
            "6dccf7a518b404f33d07"
        ]
    },
    "gsm8k-fusion": {
        "problems": [
            "0f9262a9d543b511f070"
        ],
        "candidates": [
            "9e5c8bb40e05ee1ef7ea",
            "a30cd51345582851898b",
            "234825e520bb82e9faff",
            "ca630d158a69bdd76809",
            "f6862ae99f8a217501f1"
        ],
        "verdicts": [
            "fdedfa631157266c3f7f",
            "a93a6a48bacaeddd2f2f",
            "60a090372a3b7176c2b2",
            "e108f3bfad97794fa886",
            "58a72d70c6def28c8b94"
        ],
        "problem_stats": [
            "26a17bd4707e90be73cd"
        ],
        "genselect": [
            "a7a5c75173328e3390cd"
        ],
        "fusion_pools": [
            "d95c5463fe8064835e84"
        ],
        "fusion_select": [
            "f5b7380837399f1eb6a2"
        ],
        "fusion": [
            "2054b2983ec6be6c91e0"
        ]
    },
    "gsm8k-300-maxk": {
        "candidates": [
            "76faa56b6902c1e2715d",
            "abe4b15fb4d2370b6087",
            "04332cd7048998e45f95",
            "bc8d3342402c2f8ff644"
        ],
        "genselect": [
            "767bec8cee5deaa938be"
        ],
        "maxk_weights": [
            "66217927c49232820b29"
        ],
        "problem_stats": [
            "6684232ca8fc735fc09c"
        ],
        "problems": [
            "04c4ca407dfd600d8be4"
        ],
        "verdicts": [
            "dcc993ad030f6348021f",
            "aae09943f52e4d47a18a",
            "b613162e5fb58fe9adf4",
            "852e5652ccfd03b0a04b"
        ]
    },
    "sampled": {
        "candidates": [
            "eeb7966a20e88e061cff"
        ],
        "genselect": [
            "16c3a6edaaa3d80287e9"
        ],
        "problem_stats": [
            "cacf0c869e13b0d79d7b"
        ],
        "problems": [
            "68f34b98a5e0d3b22470"
        ],
        "verdicts": [
            "810567ed5f7c03de8f45"
        ]
    },
    "gsm8k-300-selector-eval": {
        "candidates": [
            "76faa56b6902c1e2715d",
            "abe4b15fb4d2370b6087",
            "04332cd7048998e45f95",
            "bc8d3342402c2f8ff644"
        ],
        "genselect": [
            "767bec8cee5deaa938be"
        ],
        "problem_stats": [
            "6684232ca8fc735fc09c"
        ],
        "problems": [
            "04c4ca407dfd600d8be4"
        ],
        "selector_eval": [
            "ef9f4ff782545f0a24c7"
        ],
        "verdicts": [
            "dcc993ad030f6348021f",
            "aae09943f52e4d47a18a",
            "b613162e5fb58fe9adf4",
            "852e5652ccfd03b0a04b"
        ]
    },
    "gsm8k-300-selector-eval-pool": {
        "candidates": [
            "76faa56b6902c1e2715d",
            "abe4b15fb4d2370b6087",
            "04332cd7048998e45f95",
            "bc8d3342402c2f8ff644"
        ],
        "genselect": [
            "767bec8cee5deaa938be"
        ],
        "problem_stats": [
            "6684232ca8fc735fc09c"
        ],
        "problems": [
            "04c4ca407dfd600d8be4"
        ],
        "selector_eval": [
            "b14a019dba6d02ab29b9"
        ],
        "verdicts": [
            "dcc993ad030f6348021f",
            "aae09943f52e4d47a18a",
            "b613162e5fb58fe9adf4",
            "852e5652ccfd03b0a04b"
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
