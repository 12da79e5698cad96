"""The smoke runs of the benchmark scripts that load a vLLM engine (``tests/benchmarks/test_smoke.py`` runs the
others). Each runs inside the real-model test that has the same engine loaded or starts the same engine process
already, so that CI pays no engine start of its own for it (one costs minutes on a 2-core machine): the script's
``main`` on the test's engine, or the script itself in place of the test's own vLLM process. As in
``test_smoke.py``, each must exit 0 and print its lines; no figure is asserted."""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"


@dataclass(frozen=True)
class OnEngine:
    """A tiny run of one script inside ``test`` (``file::function``): its arguments (``{tmp}``: the test's
    temporary folder) and the lines it must print (regular expressions, each matching a line)."""

    test: str
    args: tuple[str, ...]
    prints: tuple[str, ...]


ON_ENGINE = {
    # the build with and without early stopping, on the engine of the real early-stopping test
    "early_stop": OnEngine("tests/builds/test_early_stop_real.py::test_the_benchmark_runs_on_this_engine",
                           ("--problems", "2", "--n", "2", "--max-tokens", "8", "--target", "0"),
                           (r"^one batch +\d+ ", r"^no rounds +\d+ ", r"^rounds +\d+ ",
                            r"^saving: .* same dataset content: True$",
                            r"^tokens/s / one batch \(the mean of before and after\): without rounds ",
                            r"^the rule's ceiling \(the one batch's samples, at most 2 in flight\): ")),
    # transformers, then vLLM offline in a process of its own: the test's vLLM process, the test's conversations
    "reward_model": OnEngine("tests/scoring/test_reward_model.py::test_vllm_offline_gives_the_same_scores",
                             ("--items", "{tmp}/items.json", "--max-length", "1024", "--scores", "{tmp}/scores.json"),
                             (r"^transformers +load .* scores/s", r"^vllm +load .* scores/s",
                              r"^vllm / transformers: .*x +largest score difference")),
    # the sampling stage, then raw vLLM in the same replica: the module's engine of the real vllm engine tests
    "vllm_engine": OnEngine("tests/llm/test_vllm_engine_real.py::test_the_benchmark_runs_on_this_engine",
                            ("--problems", "2", "--n", "1", "--max-tokens", "8", "--target", "0"),
                            (r"^stage: 2 samples", r"^raw: +2 samples", r"^tokens/s  stage .* ratio")),
}


def argv(script: str, tmp: Path) -> list[str]:
    return [a.replace("{tmp}", str(tmp)) for a in ON_ENGINE[script].args]


def load(script: str) -> ModuleType:
    """``benchmarks/<script>.py`` imported (as ``bench_<script>``; its folder on the path, for ``_common``)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    name = f"bench_{script}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{script}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def unprinted(script: str, out: str) -> list[str]:
    """The patterns of ``script``'s run that no line of ``out`` matches."""
    return [p for p in ON_ENGINE[script].prints if not re.search(p, out, re.M)]
