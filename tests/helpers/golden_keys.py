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
            "fdd1e5dc69f90a93e410",
            "cc48ed7e9b57eba17fcd",
            "b101269efd5ded2f275d",
            "3f7d24833537b7736147"
        ],
        "problem_stats": [
            "30610593136373cb30ed"
        ],
        "genselect": [
            "328e65d11198c6afa55a"
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
            "fdd1e5dc69f90a93e410",
            "cc48ed7e9b57eba17fcd",
            "b101269efd5ded2f275d",
            "3f7d24833537b7736147"
        ],
        "problem_stats": [
            "7667b4f3294406b5728f"
        ],
        "genselect": [
            "6a2d9c386b2929c7aca4"
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
            "eab5f392a395c7c53c3f"
        ],
        "verdicts": [
            "63e0427510e55610c813",
            "39d25f22739c3abae0c0",
            "7878d3a3ed13270858ad",
            "01f59945d3a51a27eb63",
            "3226c3c72ff438a2d24e"
        ],
        "problem_stats": [
            "c2b7e2875fcf08960aaa"
        ],
        "genselect": [
            "bad866e61ab1e9cc0bec"
        ],
        "fusion_pools": [
            "c950d28b6cb4fe28d219"
        ],
        "fusion_select": [
            "16d266a3ebfbd7605590"
        ],
        "fusion": [
            "03dc905d7c59d06e8b2f"
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
            "c608a871fa2b6b795806"
        ],
        "maxk_weights": [
            "aa045ea4de4f31127685"
        ],
        "problem_stats": [
            "13ff40290a8eebeb7e29"
        ],
        "problems": [
            "c1613b206bf408a63a29"
        ],
        "verdicts": [
            "9828bab631ce92f7ea69",
            "eb6036b878606c078a24",
            "e210499d61f5d950d91e",
            "6426fd6fee1212d1246d"
        ]
    },
    "sampled": {
        "candidates": [
            "1eae7e0a7e9968b7b76e"
        ],
        "genselect": [
            "fcd88193ae24d9f74474"
        ],
        "problem_stats": [
            "768938ad02de394da672"
        ],
        "problems": [
            "b3727eca57ff9c1d78dd"
        ],
        "verdicts": [
            "12abe40ec97f2a0cdf27"
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
            "c608a871fa2b6b795806"
        ],
        "problem_stats": [
            "13ff40290a8eebeb7e29"
        ],
        "problems": [
            "c1613b206bf408a63a29"
        ],
        "selector_eval": [
            "766e9a7fa13b977ec529"
        ],
        "verdicts": [
            "9828bab631ce92f7ea69",
            "eb6036b878606c078a24",
            "e210499d61f5d950d91e",
            "6426fd6fee1212d1246d"
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
            "c608a871fa2b6b795806"
        ],
        "problem_stats": [
            "13ff40290a8eebeb7e29"
        ],
        "problems": [
            "c1613b206bf408a63a29"
        ],
        "selector_eval": [
            "ccf1830545b3323fa5ac"
        ],
        "verdicts": [
            "9828bab631ce92f7ea69",
            "eb6036b878606c078a24",
            "e210499d61f5d950d91e",
            "6426fd6fee1212d1246d"
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
