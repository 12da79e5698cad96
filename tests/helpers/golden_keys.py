"""Every stage key of the builds the integration tests run, pinned (the golden keys).

A key changes only through a deliberate version bump (or key-config change) in the stage's own module;
then update the pin here in the same commit. A key that changes as a side effect of a refactor fails here.

The verdicts keys (and so every key downstream of them) also carry the judge's fingerprint
(``bonforge.judging.fingerprint``): a change to the code of ``judging/math.py`` (maths) or of the code
judge and ``sandbox/`` (code), or another installed version of math-verify, latex2sympy2_extended,
antlr4-python3-runtime or sympy, changes them on purpose (comments, docstrings and formatting do not). The
fingerprint names files by their path in the package and holds no image id, so the pins are the same
on every machine with the same sources and libraries.
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
            "492df36fb88ba7f309a3",
            "ba2cfa4e429b8a00d309",
            "e02ba6d7510cb4a3d36b",
            "c84cf89eff2326cd1363"
        ],
        "problem_stats": [
            "af845030d2d1128c0f7a"
        ],
        "genselect": [
            "e8b6fc89b63968465e91"
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
            "492df36fb88ba7f309a3",
            "ba2cfa4e429b8a00d309",
            "e02ba6d7510cb4a3d36b",
            "c84cf89eff2326cd1363"
        ],
        "problem_stats": [
            "afb9f038b4e99ccd1b78"
        ],
        "genselect": [
            "79307fc9b964a9c3ed2a"
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
            "f3e117a3d1391958616e",
            "41cbf28b6a3858147e99"
        ],
        "problem_stats": [
            "8188900280fc97b77e3a"
        ],
        "genselect": [
            "677214df8dca511364ef"
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
            "8a61f26035e83c78f5d4",
            "bfd8ff90bf90d0f962f0"
        ],
        "problem_stats": [
            "4db80f9ffc22e93afcde"
        ],
        "genselect": [
            "18549a9b7831f7039d32"
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
            "8fd1ca7325d5616098ed"
        ],
        "verdicts": [
            "ccec055f022aec673d05",
            "13a9acb0910d2bd1ff8b",
            "94fbba39c7c82763b36f",
            "e1b04b4ad6bfaeadd022",
            "27041fd4e6f62bd3df99"
        ],
        "problem_stats": [
            "439bf8a5355922fbcb93"
        ],
        "genselect": [
            "a96a66d04b8ef0aa8f01"
        ],
        "fusion_pools": [
            "b42df1183f1c7691ce82"
        ],
        "fusion_select": [
            "3f4993162dedacd80e05"
        ],
        "fusion": [
            "bfe653685861a837a331"
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
            "87feb8fc800435134f73"
        ],
        "maxk_weights": [
            "69fdcc09f2019a5c0e32"
        ],
        "problem_stats": [
            "e1bb1faae6eff945ea9a"
        ],
        "problems": [
            "04c4ca407dfd600d8be4"
        ],
        "verdicts": [
            "25ed79cf0769deea88b5",
            "ee2c95cf9a4f41401261",
            "17a15c64384291904025",
            "b88d5268793c30057b41"
        ]
    },
    "sampled": {
        "candidates": [
            "eeb7966a20e88e061cff"
        ],
        "genselect": [
            "5c7f56b00b606f477b69"
        ],
        "problem_stats": [
            "c560bb2b2b65c6e752e5"
        ],
        "problems": [
            "68f34b98a5e0d3b22470"
        ],
        "verdicts": [
            "7db251fb2cad6e710250"
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
            "87feb8fc800435134f73"
        ],
        "problem_stats": [
            "e1bb1faae6eff945ea9a"
        ],
        "problems": [
            "04c4ca407dfd600d8be4"
        ],
        "selector_eval": [
            "ef785e288f1ae7af54d5"
        ],
        "verdicts": [
            "25ed79cf0769deea88b5",
            "ee2c95cf9a4f41401261",
            "17a15c64384291904025",
            "b88d5268793c30057b41"
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
            "87feb8fc800435134f73"
        ],
        "problem_stats": [
            "e1bb1faae6eff945ea9a"
        ],
        "problems": [
            "04c4ca407dfd600d8be4"
        ],
        "selector_eval": [
            "19674f91e1c947951bbd"
        ],
        "verdicts": [
            "25ed79cf0769deea88b5",
            "ee2c95cf9a4f41401261",
            "17a15c64384291904025",
            "b88d5268793c30057b41"
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
