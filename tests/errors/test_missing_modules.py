"""A module an engine, a scorer or an S3 store needs and the environment lacks: one `error:` line naming the
module, what in the recipe needs it and the recipe's one install command, exit code 2, before any work (no
traceback, no store written). The module is taken away in a fresh process (``sys.modules[name] = None``, as if
it were not installed); controls: the same recipes with nothing taken away pass the check, and every shipped
recipe's header names the install command its kinds need. All cases run in one process, one after another, the
module put back after each (the check looks modules up, never imports them)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bonforge.config import check_installed, load_recipe
from bonforge.config_model import install_command

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"
GSM8K, OPEN = RECIPES / "gsm8k-genselect.yaml", RECIPES / "arena-hard-bon.yaml"
HF, OPEN_EXTRA = 'python -m pip install -e ".[hf]"', 'python -m pip install -e ".[hf,open]"'


def teacher(spec: str) -> list[str]:
    return [f"teachers=[{{name: t, {spec}}}]"]


def scorers(spec: str, pick: str = "s") -> list[str]:
    return [f"scorers=[{{name: s, {spec}}}]", f"bon.scorer={pick}", "bon.filter.language=null"]


JUDGE = "kind: judge, judge: {name: j, engine: transformers, model: /models/judge}"
CASES = {  # kind: (recipe, overrides, module taken away, the install command named)
    "transformers engine": (GSM8K, teacher("engine: transformers, model: /models/m"), "transformers", HF),
    "transformers engine, a known model's GGUF file": (
        GSM8K, teacher("engine: transformers, model: smollm2-135m-instruct"), "gguf", HF),
    "transformers engine, a known model's loader": (
        GSM8K, teacher("engine: transformers, model: smollm2-135m-instruct"), "accelerate", HF),
    "vLLM on GPUs": (GSM8K, teacher("engine: vllm, model: /models/m"), "vllm", 'python -m pip install -e ".[vllm]"'),
    "vLLM on a CPU": (GSM8K, teacher("engine: vllm, device: cpu, model: /models/m"), "vllm",
                      "python -m bonforge.llm.cpu_models"),
    "reward model": (OPEN, [], "torch", OPEN_EXTRA),
    "reward model on vLLM": (OPEN, scorers("kind: reward_model, engine: vllm, model: /models/rm"), "vllm",
                             'python -m pip install -e ".[hf,vllm]"'),
    "judge": (OPEN, scorers(JUDGE), "transformers", HF),
    "language ID": (OPEN, [], "fasttext", OPEN_EXTRA),
    "reference metric": (OPEN, scorers("kind: reference, metric: chrf"), "sacrebleu",
                         'python -m pip install -e ".[open]"'),
    "embeddings": (OPEN, scorers("kind: reference, metric: embed_cosine"), "torch", HF),
    "S3 source": (GSM8K, ["problems.source={path: s3://bucket/gsm8k.jsonl}"], "boto3",
                  'python -m pip install -e ".[s3]"'),
    "GenSelect tokenizer": (GSM8K, ["genselect.tokenizer=/models/tokenizer.json"], "tokenizers", HF),
}


RUNNER = """
import json, sys
from bonforge.cli import app
codes = {}
for kind, (module, argv) in json.loads(sys.argv[1]).items():
    sys.stderr.write(f"\\x00{kind}\\n")
    sys.stderr.flush()
    before = sys.modules.pop(module, None)
    sys.modules[module] = None  # as if it were not installed
    try:
        codes[kind] = app(argv, standalone_mode=False)
    finally:
        del sys.modules[module]
        if before is not None:
            sys.modules[module] = before
    sys.stderr.flush()
print(json.dumps(codes))
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, tuple[int, str, Path]]:
    """Each case's CLI build with its module taken away, all in one fresh process: exit code, stderr, store."""
    cases, stores = {}, {}
    for kind, (recipe, overrides, module, _) in {**CASES, "S3 store": (GSM8K, [], "fsspec", "")}.items():
        stores[kind] = "s3://bucket/prefix" if kind == "S3 store" else str(tmp_path_factory.mktemp("store"))
        argv = ["run", str(recipe), "--store", stores[kind], *(a for o in overrides for a in ("--set", o))]
        cases[kind] = (module, argv)
    home = tmp_path_factory.mktemp("home")  # no `bonforge up` builder to hand the builds to: they run here
    done = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(cases)], capture_output=True, text=True,
                          timeout=600, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), "BONFORGE_HOME": str(home)})
    assert done.returncode == 0, done.stderr[-3000:]
    codes = json.loads(done.stdout.strip().splitlines()[-1])
    errs = dict(part.split("\n", 1) for part in done.stderr.split("\x00")[1:])
    return {kind: (codes[kind], errs[kind], Path(stores[kind])) for kind in cases}


@pytest.mark.parametrize("kind", CASES)
def test_a_missing_module_is_one_error_line_naming_the_install_command(kind, outcomes):
    _, _, module, command = CASES[kind]
    code, stderr, store = outcomes[kind]
    assert code == 2, stderr[-3000:]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: not installed: "), stderr[-3000:]
    assert re.search(rf"\b{module} \(", lines[0]) and lines[0].endswith(f"install command: {command}"), lines[0]
    assert not (store / "stages").exists()  # nothing computed


def test_an_s3_store_without_its_modules_is_one_error_line(outcomes):
    code, stderr, _ = outcomes["S3 store"]
    assert code == 2 and stderr.strip() == ("error: not installed: fsspec (--store); the recipe's install command: "
                                            'python -m pip install -e ".[s3]"'), stderr[-3000:]


@pytest.mark.parametrize("kind", CASES)
def test_with_every_module_installed_the_check_passes(kind, monkeypatch):
    """The control: the check finds what the environment has (a stand-in finder that finds every module)."""
    recipe, overrides, _, _ = CASES[kind]
    monkeypatch.setattr("importlib.util.find_spec", lambda name: object())
    check_installed(load_recipe(recipe, overrides), "s3://bucket/prefix")


def header(path: Path) -> str:
    return "".join(line for line in path.read_text().splitlines(keepends=True) if line.startswith("#"))


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_recipe_header_names_its_install_command_and_time(path):
    """The header's `# Install:` line is the command the check would name; `# Time here:` says what the recipe
    costs on the 2-core machine (or why it was not run here)."""
    needs = load_recipe(path).needs()
    text = header(path)
    assert f"# Install: {install_command(n.extra for n in needs)}\n" in text, text
    assert re.search(r"^# Time here: \S", text, re.M), text
