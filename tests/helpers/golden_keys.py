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
            "9dc515e8161b102b5739",
            "037c21fa93e1779fd270",
            "52df723dd4def5cac59b",
            "2c9422f9bd3bd1cf613a"
        ],
        "problem_stats": [
            "c7cd5dfee3474716c655"
        ],
        "genselect": [
            "1a7be077309fc9dd247b"
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
            "9dc515e8161b102b5739",
            "037c21fa93e1779fd270",
            "52df723dd4def5cac59b",
            "2c9422f9bd3bd1cf613a"
        ],
        "problem_stats": [
            "231bc1e2339fb4ab2f8a"
        ],
        "genselect": [
            "c730b778ca94b731bb60"
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
            "ed0065bfa8c343a807d4",
            "c11d74e6e3c3ca090b34"
        ],
        "problem_stats": [
            "8eb14c01a0173f25cad0"
        ],
        "genselect": [
            "5cf0b3264bd5811bc4fc"
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
            "602619ca15b3e4fc595f",
            "25de784010761f5e2439"
        ],
        "problem_stats": [
            "83b0b94da05bacb371c1"
        ],
        "genselect": [
            "7b17bf0cc79fa0c6bce9"
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
            "fd043e240f619a40ef13"
        ],
        "verdicts": [
            "2a09cd6ef2224fab6afb",
            "cb3468112c7a0dc81691",
            "8f442926e3321e2a236d",
            "3e9a89ce712472ac2c47",
            "b64353c1fc992fd3cfe0"
        ],
        "problem_stats": [
            "b182bbcf5709ef34b807"
        ],
        "genselect": [
            "23ce189141c5aa8fcb15"
        ],
        "fusion_pools": [
            "8486c05117b5d6d4630d"
        ],
        "fusion_select": [
            "1d82dcad2de7b1476d82"
        ],
        "fusion": [
            "3f2d39fcb012a94706b1"
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
            "3f79c30b378d618ddaca"
        ],
        "maxk_weights": [
            "b4a12fb604a9a4de1d2e"
        ],
        "problem_stats": [
            "bb4634d3cc2013405a91"
        ],
        "problems": [
            "287f79990f3b46587862"
        ],
        "verdicts": [
            "f24923651e5c7af457ae",
            "513f434535357bfb43b6",
            "e19508eef32528b2b131",
            "7453d6732d52cddbda58"
        ]
    },
    "sampled": {
        "candidates": [
            "8f2de485b2551c1ab239"
        ],
        "genselect": [
            "d1f4989819bf9786104b"
        ],
        "problem_stats": [
            "ff1c86fc272c561b632f"
        ],
        "problems": [
            "2d96c2eca998e4f0e5ce"
        ],
        "verdicts": [
            "a5d07638ccd364a5bec9"
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
            "3f79c30b378d618ddaca"
        ],
        "problem_stats": [
            "bb4634d3cc2013405a91"
        ],
        "problems": [
            "287f79990f3b46587862"
        ],
        "selector_eval": [
            "949afec33cdb3c831c2e"
        ],
        "verdicts": [
            "f24923651e5c7af457ae",
            "513f434535357bfb43b6",
            "e19508eef32528b2b131",
            "7453d6732d52cddbda58"
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
            "3f79c30b378d618ddaca"
        ],
        "problem_stats": [
            "bb4634d3cc2013405a91"
        ],
        "problems": [
            "287f79990f3b46587862"
        ],
        "selector_eval": [
            "b1b15a63a336b133d0de"
        ],
        "verdicts": [
            "f24923651e5c7af457ae",
            "513f434535357bfb43b6",
            "e19508eef32528b2b131",
            "7453d6732d52cddbda58"
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
