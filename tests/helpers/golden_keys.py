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
            "94685003f5c6b4e5f0fe",
            "a01b3b9d55b43c70c078",
            "b391e9d8db87415d2a06",
            "a6acb1ded5cef61d69b2"
        ],
        "verdicts": [
            "ce55a86f5f42b9391143",
            "30263a9d4b0349bdcc2f",
            "1f784e55d15b94561843",
            "01d51a80b3388ea414f2"
        ],
        "problem_stats": [
            "de611e7dd406fc4a21f1"
        ],
        "genselect": [
            "ecb8a06a15e7074cba22"
        ]
    },
    "gsm8k-genselect-looser": {
        "problems": [
            "faa90fddca56eefe13e7"
        ],
        "candidates": [
            "94685003f5c6b4e5f0fe",
            "a01b3b9d55b43c70c078",
            "b391e9d8db87415d2a06",
            "a6acb1ded5cef61d69b2"
        ],
        "verdicts": [
            "ce55a86f5f42b9391143",
            "30263a9d4b0349bdcc2f",
            "1f784e55d15b94561843",
            "01d51a80b3388ea414f2"
        ],
        "problem_stats": [
            "d7d1cd35766f1437f011"
        ],
        "genselect": [
            "0bb814f04cc8740241de"
        ]
    },
    "apps-genselect": {
        "problems": [
            "3ad7d783da72e2943572"
        ],
        "candidates": [
            "8f4aa0c7d206464e10f5",
            "b7e1640f49973c118328"
        ],
        "verdicts": [
            "545b9364b73412d79378",
            "fcaccd40e18ff439f407"
        ],
        "problem_stats": [
            "4442aade0670bfdc5ff5"
        ],
        "genselect": [
            "6f7beae8c4504f84647e"
        ]
    },
    "humaneval-genselect": {
        "problems": [
            "4e8333a1c5672d5a6983"
        ],
        "candidates": [
            "0f75bf83fe8072167501",
            "f09142d7619d9d487dff"
        ],
        "verdicts": [
            "10867bfad6169f7c5d5f",
            "96b46f5a08bfc80732da"
        ],
        "problem_stats": [
            "55672f623ccd1d8101c4"
        ],
        "genselect": [
            "acbf6dc2a4b2d4638287"
        ]
    },
    "gsm8k-fusion": {
        "problems": [
            "269007f96e6825d5d20a"
        ],
        "candidates": [
            "7f353f46ded8098e8d24",
            "d1de0626cbcf0f254d5d",
            "f87cfc27f8e302c8d004",
            "83dd8a0f8d3daec3d325",
            "04efa20edfb9516f929b"
        ],
        "verdicts": [
            "9e191746117eeb8039c4",
            "a13ce1c82bb052e7bd9c",
            "8c41800137eb6ebcf9c4",
            "a7686d138808c5057bdc",
            "a00d7e44a8f388980bce"
        ],
        "problem_stats": [
            "d2fd121cad084ce7786e"
        ],
        "genselect": [
            "d619ed6459d0cb4129c2"
        ],
        "fusion_pools": [
            "4cfb7c72cdc20497f278"
        ],
        "fusion_select": [
            "5f8013dd16ce008bdbd5"
        ],
        "fusion": [
            "a4d60f501706ca0e2fb5"
        ]
    },
    "gsm8k-300-maxk": {
        "candidates": [
            "34af4129bf7f3e3a0e12",
            "2f633da20c781b330774",
            "126ba3096d59979ae825",
            "0e629f5959cf2e3eacf5"
        ],
        "genselect": [
            "729ae6c6ac40a13d345b"
        ],
        "maxk_weights": [
            "80de2c72a08982dbdbba"
        ],
        "problem_stats": [
            "693505d909d536dffc1b"
        ],
        "problems": [
            "c1613b206bf408a63a29"
        ],
        "verdicts": [
            "1481ba63dbd8ad7a308f",
            "28b4b81b81242cc6c114",
            "24ff8b8431e21aec74c3",
            "9ec9b01ded17ebb638b7"
        ]
    },
    "sampled": {
        "candidates": [
            "1eae7e0a7e9968b7b76e"
        ],
        "genselect": [
            "6a8811d5b19bff69f06f"
        ],
        "problem_stats": [
            "686ea17e1b146a567428"
        ],
        "problems": [
            "b3727eca57ff9c1d78dd"
        ],
        "verdicts": [
            "2a443d6cfc09468aebb5"
        ]
    },
    "gsm8k-300-selector-eval": {
        "candidates": [
            "34af4129bf7f3e3a0e12",
            "2f633da20c781b330774",
            "126ba3096d59979ae825",
            "0e629f5959cf2e3eacf5"
        ],
        "genselect": [
            "729ae6c6ac40a13d345b"
        ],
        "problem_stats": [
            "693505d909d536dffc1b"
        ],
        "problems": [
            "c1613b206bf408a63a29"
        ],
        "selector_eval": [
            "7eaad0344ee66126768f"
        ],
        "verdicts": [
            "1481ba63dbd8ad7a308f",
            "28b4b81b81242cc6c114",
            "24ff8b8431e21aec74c3",
            "9ec9b01ded17ebb638b7"
        ]
    },
    "gsm8k-300-selector-eval-pool": {
        "candidates": [
            "34af4129bf7f3e3a0e12",
            "2f633da20c781b330774",
            "126ba3096d59979ae825",
            "0e629f5959cf2e3eacf5"
        ],
        "genselect": [
            "729ae6c6ac40a13d345b"
        ],
        "problem_stats": [
            "693505d909d536dffc1b"
        ],
        "problems": [
            "c1613b206bf408a63a29"
        ],
        "selector_eval": [
            "eba0246b06276a501d7a"
        ],
        "verdicts": [
            "1481ba63dbd8ad7a308f",
            "28b4b81b81242cc6c114",
            "24ff8b8431e21aec74c3",
            "9ec9b01ded17ebb638b7"
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
