"""Every stage key of the builds the integration tests run, pinned (the golden keys).

A key changes only through a deliberate version bump (or key-config change) in the stage's own module;
then update the pin here in the same commit. A key that changes as a side effect of a refactor fails here.

The verdicts keys (and so every key downstream of them) also carry the judge's fingerprint
(``bonforge.judging.fingerprint``): a change to the code of ``judging/math*.py`` (maths) or of the code
judge and ``sandbox/`` (code), or another installed version of math-verify, latex2sympy2_extended,
antlr4-python3-runtime or sympy, changes them on purpose (comments, docstrings and formatting do not). The
fingerprint names files by their path in the package and holds no image id, so the pins are the same
on every machine with the same sources and libraries.
"""

from __future__ import annotations

GOLDEN: dict[str, dict[str, list[str]]] = {
    "gsm8k-genselect": {
        "problems": [
            "faa90fddca56eefe13e7"
        ],
        "candidates": [
            "9e2f9c96bbf0919a3b2e",
            "6099acfa2b617ca9f70f",
            "dc92d2a930debb62d1a9",
            "f224e8636eae1b7d9dd4"
        ],
        "verdicts": [
            "5fb615c0bc1513873dea",
            "d45a55aa1958765ce343",
            "a2a64043580927a1f0ce",
            "a72d28c370f0dc71ca51"
        ],
        "problem_stats": [
            "6af491e2529f0141ea35"
        ],
        "genselect": [
            "bfc70c58330c3bd8f8f1"
        ]
    },
    "gsm8k-genselect-looser": {
        "problems": [
            "faa90fddca56eefe13e7"
        ],
        "candidates": [
            "9e2f9c96bbf0919a3b2e",
            "6099acfa2b617ca9f70f",
            "dc92d2a930debb62d1a9",
            "f224e8636eae1b7d9dd4"
        ],
        "verdicts": [
            "5fb615c0bc1513873dea",
            "d45a55aa1958765ce343",
            "a2a64043580927a1f0ce",
            "a72d28c370f0dc71ca51"
        ],
        "problem_stats": [
            "92c7808e9b8b67936617"
        ],
        "genselect": [
            "34071df3f1b278317470"
        ]
    },
    "apps-genselect": {
        "problems": [
            "3ad7d783da72e2943572"
        ],
        "candidates": [
            "a8372d24b34e91997036",
            "b7e1640f49973c118328"
        ],
        "verdicts": [
            "9fd0757b94bdef87b2b3",
            "77d71d068d3ede177c0d"
        ],
        "problem_stats": [
            "4e7f6e716aa1e84101bf"
        ],
        "genselect": [
            "aa885ff8075de11d2ffd"
        ]
    },
    "humaneval-genselect": {
        "problems": [
            "4e8333a1c5672d5a6983"
        ],
        "candidates": [
            "bb9eee58e900a50ecb74",
            "f09142d7619d9d487dff"
        ],
        "verdicts": [
            "c6e90889b2bfef8e57c2",
            "7b85cb8754e69384e134"
        ],
        "problem_stats": [
            "175a074e76af0ea8f7c6"
        ],
        "genselect": [
            "d391a26f395770744d3d"
        ]
    },
    "gsm8k-fusion": {
        "problems": [
            "269007f96e6825d5d20a"
        ],
        "candidates": [
            "460f5e0093e7afe2347d",
            "f39a5e7b6d6e99f3f786",
            "b23b03772a3088934e55",
            "e7a5e7f32eb89d1cfb22",
            "2e7dadc1b6adc6730d69"
        ],
        "verdicts": [
            "f2afe14d1ac12f6e5ac1",
            "85c92b1efd025dda4b77",
            "54117ca2b25404cf4843",
            "6330bdddfcc1447ff0de",
            "0fd54089cb83c3f29afa"
        ],
        "problem_stats": [
            "ab11103c7d31c54d9eb0"
        ],
        "genselect": [
            "277cbb392cbeab9c8f18"
        ],
        "fusion_pools": [
            "86ae9e37ed7cf3e9ad2b"
        ],
        "fusion_select": [
            "a24996243f14b121f81b"
        ],
        "fusion": [
            "0070264cb36ed5aef743"
        ]
    },
    "gsm8k-300-maxk": {
        "candidates": [
            "bbf713ca11c1f762f6fb",
            "a8407b060dca9c386657",
            "6d4e65ab4bc2d8319000",
            "1ab2821c240725efdd91"
        ],
        "genselect": [
            "337db35ca305daec4a31"
        ],
        "maxk_weights": [
            "0783d71e5a46aafac9e6"
        ],
        "problem_stats": [
            "3452fee91613ace39a06"
        ],
        "problems": [
            "c1613b206bf408a63a29"
        ],
        "verdicts": [
            "d5677b86bd1a26d58e0a",
            "b87697ced3253c7f2a83",
            "d5105ea7e1051f9e2cfe",
            "c32d793b5269e969f1de"
        ]
    },
    "sampled": {
        "candidates": [
            "1eae7e0a7e9968b7b76e"
        ],
        "genselect": [
            "72f47613fd94ec6bfa81"
        ],
        "problem_stats": [
            "9c054aa1cadc78295910"
        ],
        "problems": [
            "b3727eca57ff9c1d78dd"
        ],
        "verdicts": [
            "f1af6924972a565757d1"
        ]
    },
    "gsm8k-300-selector-eval": {
        "candidates": [
            "bbf713ca11c1f762f6fb",
            "a8407b060dca9c386657",
            "6d4e65ab4bc2d8319000",
            "1ab2821c240725efdd91"
        ],
        "genselect": [
            "337db35ca305daec4a31"
        ],
        "problem_stats": [
            "3452fee91613ace39a06"
        ],
        "problems": [
            "c1613b206bf408a63a29"
        ],
        "selector_eval": [
            "32993e09d4d7c691fc4c"
        ],
        "verdicts": [
            "d5677b86bd1a26d58e0a",
            "b87697ced3253c7f2a83",
            "d5105ea7e1051f9e2cfe",
            "c32d793b5269e969f1de"
        ]
    },
    "gsm8k-300-selector-eval-pool": {
        "candidates": [
            "bbf713ca11c1f762f6fb",
            "a8407b060dca9c386657",
            "6d4e65ab4bc2d8319000",
            "1ab2821c240725efdd91"
        ],
        "genselect": [
            "337db35ca305daec4a31"
        ],
        "problem_stats": [
            "3452fee91613ace39a06"
        ],
        "problems": [
            "c1613b206bf408a63a29"
        ],
        "selector_eval": [
            "07ff8e704a27171fc0ba"
        ],
        "verdicts": [
            "d5677b86bd1a26d58e0a",
            "b87697ced3253c7f2a83",
            "d5105ea7e1051f9e2cfe",
            "c32d793b5269e969f1de"
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
