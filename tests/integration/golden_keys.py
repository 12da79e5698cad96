"""Every stage key of the builds the integration tests run, pinned (the golden keys).

A key changes only through a deliberate version bump (or key-config change) in the stage's own module;
then update the pin here in the same commit. A key that changes as a side effect of a refactor fails here.
"""

from __future__ import annotations

GOLDEN: dict[str, dict[str, list[str]]] = {
    "gsm8k-genselect": {
        "problems": ["b467d73a5b2896976bd9"],
        "candidates": ["378d33049695b349a011", "58db131ea6610246d630", "aa351f09f808d83fce96", "6da0493eeefaa7afd188"],
        "verdicts": ["54072de55b1c075a2b4e", "d578f8f4058c11d09aa5", "8bb4ce6ccbea32b7d703", "4cf4d32ed865c6deecb2"],
        "problem_stats": ["bdada1c3c73842ccf4c8"],
        "genselect": ["7f0d3d822d2fc90107a8"],
    },
    "gsm8k-genselect-looser": {
        "problems": ["b467d73a5b2896976bd9"],
        "candidates": ["378d33049695b349a011", "58db131ea6610246d630", "aa351f09f808d83fce96", "6da0493eeefaa7afd188"],
        "verdicts": ["54072de55b1c075a2b4e", "d578f8f4058c11d09aa5", "8bb4ce6ccbea32b7d703", "4cf4d32ed865c6deecb2"],
        "problem_stats": ["3705b6bc1e6ea471d9f0"],
        "genselect": ["a37bc716426b94b4e0ef"],
    },
    "gsm8k-fusion": {
        "problems": ["01b2073c5d5ded8c6888"],
        "candidates": [
            "75c87b6665084309ce38",
            "a076841304b64289992f",
            "b301ec794c9d0658bced",
            "13ce5c41d9296bff38aa",
            "9eff4fca863f02586f1a",
        ],
        "verdicts": [
            "d285ba6e083f663ca4f8",
            "6de9f2e694dbb0fb0158",
            "74c6418d40201918234f",
            "0bcf2319b2f41ef5d29c",
            "0a2e7212c022b2e981b9",
        ],
        "problem_stats": ["7941e40c92fac6ab1c40"],
        "genselect": ["64da4171e1eae266f858"],
        "fusion_pools": ["4ec3a6f26fec02d80e58"],
        "fusion_select": ["4140b4ef4bd539f0966f"],
        "fusion": ["1a83aab36443d2410099"],
    },
    "apps-genselect": {
        "problems": ["45c7e3fe09be5e81fe2d"],
        "candidates": ["4ac762be96c771bad35f", "388ab2ab37ffb15e7d70"],
        "verdicts": ["ff11686826bddb68fd49", "3dd292470114e867c28f"],
        "problem_stats": ["efe8e48a09eae51abe08"],
        "genselect": ["e35ed8a2db75f96e4e81"],
    },
    "humaneval-genselect": {
        "problems": ["9ca9d7dd0a65257df713"],
        "candidates": ["ed3e01e4ac79b04828cd", "caa8730601828c9c9240"],
        "verdicts": ["ab5af8f5246b92c9e06f", "cfdbba66af942bb8401d"],
        "problem_stats": ["ee115423311fa55783fd"],
        "genselect": ["b28993ca58b98f07c05b"],
    },
    "sampled": {
        "candidates": ["6cecf9016785ea1c18a1"],
        "genselect": ["9e306021263d3f9e955b"],
        "problem_stats": ["4878c68f54a4e273db78"],
        "problems": ["d3b91ac01b951f0b1c3b"],
        "verdicts": ["83868a9ad9272d086d87"],
    },
    "gsm8k-300-selector-eval": {
        "candidates": ["f9beaab7e728e5bd46d7", "0c9d5438371a7add4f33", "e1c51e7c7fe673a7d8e2", "123ea898df4c9ad1e5e0"],
        "genselect": ["6665aa484a8424eac89d"],
        "problem_stats": ["879da01edde8262c2721"],
        "problems": ["d7b554fd67b2dcdcbf29"],
        "selector_eval": ["88cdd5d47007571d9283"],
        "verdicts": ["477edd881efa45cb19cf", "afe0010128335a5132a2", "2839d86ec86dc8df05c3", "302b41875c82f3a2fd63"],
    },
    "gsm8k-300-selector-eval-pool": {
        "candidates": ["f9beaab7e728e5bd46d7", "0c9d5438371a7add4f33", "e1c51e7c7fe673a7d8e2", "123ea898df4c9ad1e5e0"],
        "genselect": ["6665aa484a8424eac89d"],
        "problem_stats": ["879da01edde8262c2721"],
        "problems": ["d7b554fd67b2dcdcbf29"],
        "selector_eval": ["c6fa3e522d6e9edaf43c"],
        "verdicts": ["477edd881efa45cb19cf", "afe0010128335a5132a2", "2839d86ec86dc8df05c3", "302b41875c82f3a2fd63"],
    },
    "gsm8k-300-maxk": {
        "candidates": ["f9beaab7e728e5bd46d7", "0c9d5438371a7add4f33", "e1c51e7c7fe673a7d8e2", "123ea898df4c9ad1e5e0"],
        "genselect": ["6665aa484a8424eac89d"],
        "maxk_weights": ["e9a27651ea0de21cb251"],
        "problem_stats": ["879da01edde8262c2721"],
        "problems": ["d7b554fd67b2dcdcbf29"],
        "verdicts": ["477edd881efa45cb19cf", "afe0010128335a5132a2", "2839d86ec86dc8df05c3", "302b41875c82f3a2fd63"],
    },
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
