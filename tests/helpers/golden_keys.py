"""Every stage key of the builds the integration tests run, pinned (the golden keys).

A key changes only through a deliberate version bump (or key-config change) in the stage's own module;
then update the pin here in the same commit. A key that changes as a side effect of a refactor fails here.

The verdicts keys (and so every key downstream of them) also carry the judge's fingerprint
(``bonforge.judging.fingerprint``): a change to the code of ``judging/math*.py`` (maths) or of the code
judge and ``sandbox/`` (code), or another installed version of math-verify, latex2sympy2_extended,
antlr4-python3-runtime or sympy, changes them on purpose (comments, docstrings and formatting do not). The
fingerprint names files by their path in the package and holds the toolchains' versions as the sandbox image
reports them, not the image's id, so the pins are the same on every machine with the same sources, libraries
and Debian packages.
"""

from __future__ import annotations

GOLDEN: dict[str, dict[str, list[str]]] = {
    "gsm8k-genselect": {
        "problems": [
            "9d0f6a775ddc7944c0ec"
        ],
        "candidates": [
            "f243abc0dab3cd44cc68",
            "4431201afd4526706edb",
            "cdd5214c92c1d610f5a6",
            "9c00a4ccaaadfffd0f29"
        ],
        "verdicts": [
            "db6290e84875d65be7bd",
            "70bde53c4b84fb99ef57",
            "46141c8cf9f33b55ecc7",
            "19aa68991d6ee13639e5"
        ],
        "problem_stats": [
            "28f8129b4feddca6332f"
        ],
        "genselect": [
            "4c53ab41fc11cafb39cb"
        ]
    },
    "gsm8k-genselect-looser": {
        "problems": [
            "9d0f6a775ddc7944c0ec"
        ],
        "candidates": [
            "f243abc0dab3cd44cc68",
            "4431201afd4526706edb",
            "cdd5214c92c1d610f5a6",
            "9c00a4ccaaadfffd0f29"
        ],
        "verdicts": [
            "db6290e84875d65be7bd",
            "70bde53c4b84fb99ef57",
            "46141c8cf9f33b55ecc7",
            "19aa68991d6ee13639e5"
        ],
        "problem_stats": [
            "9f83e92f441e0830b2fc"
        ],
        "genselect": [
            "b5e24a5683e491b2f7cb"
        ]
    },
    "apps-genselect": {
        "problems": [
            "2864a715b9c8c5e491fc"
        ],
        "candidates": [
            "2a44f107a04cdbfc4905",
            "0eda26153dc75350a536"
        ],
        "verdicts": [
            "8195882069d5f0e2115f",
            "8c703f2470f74acdc0e1"
        ],
        "problem_stats": [
            "77169a1c95bb1acb6a3d"
        ],
        "genselect": [
            "5b1ffabff1f51dd796f6"
        ]
    },
    "humaneval-genselect": {
        "problems": [
            "d05e3d8b59cf08a4903f"
        ],
        "candidates": [
            "7a1bc540f3d53403108e",
            "92ffbeeb8dfb168a39c6"
        ],
        "verdicts": [
            "ae2e63089ad2de86a669",
            "5558cc12522d5bc29ed2"
        ],
        "problem_stats": [
            "06630529611029a1fb14"
        ],
        "genselect": [
            "ca4c80b50d89e938af5b"
        ]
    },
    "gsm8k-fusion": {
        "problems": [
            "b56e7da23779bd5cbb01"
        ],
        "candidates": [
            "0fbcc4b938251d13f715",
            "644dec186c763b5c43d5",
            "f9e70818bdb9399e335c",
            "553edab68acdfb5e5ca7",
            "156567cc90190df59739"
        ],
        "verdicts": [
            "5f4c36312e4a127a5056",
            "dbd96459f9b57b843290",
            "574518dc0a94195e6bdb",
            "869045a71c640777018e",
            "6017016d679356e2d003"
        ],
        "problem_stats": [
            "d3ee186873de15d992cb"
        ],
        "genselect": [
            "9c77b7d5b953e4226a15"
        ],
        "fusion_pools": [
            "35832861921f4ee7f64a"
        ],
        "fusion_select": [
            "0ea9642e1a80430ba870"
        ],
        "fusion": [
            "40504f47c283e43a84e7"
        ]
    },
    "gsm8k-300-maxk": {
        "candidates": [
            "94f5c145fdf5d41cef4f",
            "298693fc5462e4d3c67d",
            "453239b4fb5c8e16157b",
            "1c134782a49b61ced78e"
        ],
        "genselect": [
            "4fa867bafd516035470e"
        ],
        "maxk_weights": [
            "a399c8b897377ab58844"
        ],
        "problem_stats": [
            "4641ce892c9e007a044e"
        ],
        "problems": [
            "287f79990f3b46587862"
        ],
        "verdicts": [
            "0ec3a67ab3aa8e664cbe",
            "b137b55f9d6d37c5af7a",
            "a247967fcde79b21b43e",
            "429edda7754e10ef0281"
        ]
    },
    "sampled": {
        "candidates": [
            "8f2de485b2551c1ab239"
        ],
        "genselect": [
            "74cf1c5600ca4c119cdf"
        ],
        "problem_stats": [
            "ea0895c0574b34fafebe"
        ],
        "problems": [
            "2d96c2eca998e4f0e5ce"
        ],
        "verdicts": [
            "21c0be152e02c9a2c7b7"
        ]
    },
    "gsm8k-300-selector-eval": {
        "candidates": [
            "94f5c145fdf5d41cef4f",
            "298693fc5462e4d3c67d",
            "453239b4fb5c8e16157b",
            "1c134782a49b61ced78e"
        ],
        "genselect": [
            "4fa867bafd516035470e"
        ],
        "problem_stats": [
            "4641ce892c9e007a044e"
        ],
        "problems": [
            "287f79990f3b46587862"
        ],
        "selector_eval": [
            "10a1f0f6d2014f0508dc"
        ],
        "verdicts": [
            "0ec3a67ab3aa8e664cbe",
            "b137b55f9d6d37c5af7a",
            "a247967fcde79b21b43e",
            "429edda7754e10ef0281"
        ]
    },
    "gsm8k-300-selector-eval-pool": {
        "candidates": [
            "94f5c145fdf5d41cef4f",
            "298693fc5462e4d3c67d",
            "453239b4fb5c8e16157b",
            "1c134782a49b61ced78e"
        ],
        "genselect": [
            "4fa867bafd516035470e"
        ],
        "problem_stats": [
            "4641ce892c9e007a044e"
        ],
        "problems": [
            "287f79990f3b46587862"
        ],
        "selector_eval": [
            "553c6b741cb16e1a3f48"
        ],
        "verdicts": [
            "0ec3a67ab3aa8e664cbe",
            "b137b55f9d6d37c5af7a",
            "a247967fcde79b21b43e",
            "429edda7754e10ef0281"
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
