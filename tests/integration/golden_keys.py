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
            "8fc964a3d9483cf608a6",
            "e331369213bf3476598c",
            "76f840af943dcabf88b2",
            "1018e667253dda0bf05b"
        ],
        "verdicts": [
            "d0f7d29e88ae24922e63",
            "7363248a9d627d6a9031",
            "47b247ec16eb0c076e57",
            "56b20c6c92084b41ca01"
        ],
        "problem_stats": [
            "cbc4160d3763638cdd60"
        ],
        "genselect": [
            "9603dfadce403860e1e7"
        ]
    },
    "gsm8k-genselect-looser": {
        "problems": [
            "9f0c79233233ffd15f29"
        ],
        "candidates": [
            "8fc964a3d9483cf608a6",
            "e331369213bf3476598c",
            "76f840af943dcabf88b2",
            "1018e667253dda0bf05b"
        ],
        "verdicts": [
            "d0f7d29e88ae24922e63",
            "7363248a9d627d6a9031",
            "47b247ec16eb0c076e57",
            "56b20c6c92084b41ca01"
        ],
        "problem_stats": [
            "c952e481226a461a59e7"
        ],
        "genselect": [
            "124659568a8349707c23"
        ]
    },
    "apps-genselect": {
        "problems": [
            "b5b1c546a4cd55c23d8f"
        ],
        "candidates": [
            "90ed21e92038f490508c",
            "ea40b289d63edbe4f7a3"
        ],
        "verdicts": [
            "0201ad09f321dcce4147",
            "96b001456ccc217158be"
        ],
        "problem_stats": [
            "4fc94fa55ec5deb4106c"
        ],
        "genselect": [
            "5f8fc9c67352cba5a808"
        ]
    },
    "humaneval-genselect": {
        "problems": [
            "38ebd970ff3bfea8c4a6"
        ],
        "candidates": [
            "7668031a10892e3df04c",
            "614d661c47c13a17779b"
        ],
        "verdicts": [
            "0e1973d1eddcb49cb847",
            "2961a2d10ef42697ac95"
        ],
        "problem_stats": [
            "7d6b792fd89739487a79"
        ],
        "genselect": [
            "0df65810906e81995b36"
        ]
    },
    "gsm8k-fusion": {
        "problems": [
            "0f9262a9d543b511f070"
        ],
        "candidates": [
            "1bf8037741f33b65f73a",
            "8a9513acbcbf3c3b2b78",
            "646fea8028124c036e75",
            "cc24e889a2778f4a4228",
            "000c586e67a18ab78e30"
        ],
        "verdicts": [
            "3fd8ece4a6bfd746e0b9",
            "809676746069116adead",
            "c782c2c0b5d1d1f023f8",
            "b49c8db26cdbf921fdeb",
            "b031fec7d69e5472f9ef"
        ],
        "problem_stats": [
            "5f27224b38c92fe974ba"
        ],
        "genselect": [
            "1d56ab2ff80152c165e1"
        ],
        "fusion_pools": [
            "ac443973c9b1b0cd2120"
        ],
        "fusion_select": [
            "eed97710ab755a7e74ec"
        ],
        "fusion": [
            "8fd3eb5809efd2de4813"
        ]
    },
    "gsm8k-300-maxk": {
        "candidates": [
            "33cd4b8e294cb7579d0a",
            "f91c5b1c92fcd5cad681",
            "05e50149b032e58cd949",
            "0e594e3956cd29b8017c"
        ],
        "genselect": [
            "c55aa4e46718572518d7"
        ],
        "maxk_weights": [
            "671a18ab957411e0b107"
        ],
        "problem_stats": [
            "4221ff1a3a7ae2aafddb"
        ],
        "problems": [
            "04c4ca407dfd600d8be4"
        ],
        "verdicts": [
            "a8f483bef3b6ca08f3a4",
            "9116f6e861fc40b9f0b5",
            "ff7a9172adbebddc9797",
            "3705d97183b30d8626d7"
        ]
    },
    "sampled": {
        "candidates": [
            "653c614ae9f0ecfd7f0c"
        ],
        "genselect": [
            "e8b59f96cae73ce566fc"
        ],
        "problem_stats": [
            "594954f0b2361cafaa72"
        ],
        "problems": [
            "68f34b98a5e0d3b22470"
        ],
        "verdicts": [
            "5e151231a590cd4742ef"
        ]
    },
    "gsm8k-300-selector-eval": {
        "candidates": [
            "33cd4b8e294cb7579d0a",
            "f91c5b1c92fcd5cad681",
            "05e50149b032e58cd949",
            "0e594e3956cd29b8017c"
        ],
        "genselect": [
            "c55aa4e46718572518d7"
        ],
        "problem_stats": [
            "4221ff1a3a7ae2aafddb"
        ],
        "problems": [
            "04c4ca407dfd600d8be4"
        ],
        "selector_eval": [
            "565f0393fc65626958c3"
        ],
        "verdicts": [
            "a8f483bef3b6ca08f3a4",
            "9116f6e861fc40b9f0b5",
            "ff7a9172adbebddc9797",
            "3705d97183b30d8626d7"
        ]
    },
    "gsm8k-300-selector-eval-pool": {
        "candidates": [
            "33cd4b8e294cb7579d0a",
            "f91c5b1c92fcd5cad681",
            "05e50149b032e58cd949",
            "0e594e3956cd29b8017c"
        ],
        "genselect": [
            "c55aa4e46718572518d7"
        ],
        "problem_stats": [
            "4221ff1a3a7ae2aafddb"
        ],
        "problems": [
            "04c4ca407dfd600d8be4"
        ],
        "selector_eval": [
            "a478ed017fcbdb827d8c"
        ],
        "verdicts": [
            "a8f483bef3b6ca08f3a4",
            "9116f6e861fc40b9f0b5",
            "ff7a9172adbebddc9797",
            "3705d97183b30d8626d7"
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
