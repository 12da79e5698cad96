"""Every script in ``benchmarks/`` runs at a tiny size: a smoke run, so that none breaks unseen when the code
it measures changes. Each runs as a user runs it (``python benchmarks/<script>.py ...`` from the repository
root, in a process of its own) and must exit 0 and print its table or ratio line; no figure is asserted.

The scripts that build with Prefect and Ray use one Prefect server and Ray head for the session (``bonforge
up`` in a temporary home, handed over as ``PREFECT_API_URL`` and ``RAY_ADDRESS``), as a configured cluster
gives them: their own start of these services is what tests/services covers, and on a 2-core machine it
would cost more than the scripts' work."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
TWO_PROGRAMS = ["def f(x):\n    return x + 1\nassert f(1) == 2\n", "assert 1 == 2\n"]  # one passes, one fails


@dataclass(frozen=True)
class Smoke:
    """A tiny run of one script: its arguments (``{tmp}``: the test's temporary folder), the lines it must
    print (regular expressions, each matching a line), and what it needs."""

    args: tuple[str, ...]
    prints: tuple[str, ...]
    needs: tuple[str, ...] = ()  # "data" (the mirror), "docker", "services" (the session's Prefect and Ray), "vllm"
    timeout_s: int = 300


SMOKE = {
    "checker_isolation": Smoke(("--against", ".", "-n", "2", "-c", "2", "--rounds", "1"),
                               (r"^this tree +plan .* ms +replay .* ms$", r"^this tree / against: plan .*x"),
                               needs=("docker",)),
    "dag_overhead": Smoke(("--problems", "12"),
                          (r"^start: imports ", r"^DAG: .* = .*x", r"^`bonforge run`: first .*, cached re-run ",
                           r"^filter change .* with it \(median of 3"), needs=("data", "services"), timeout_s=600),
    "decontaminate": Smoke(("--problems", "500", "--items", "20", "--planted", "5"),
                           (r"^stage \(vectorised, with dedup\): ", r"^ratio python / stage: .*same problems dropped")),
    "early_stop --pools-only": Smoke(("--pools-only",), (r"^GSM8K, 4 GPT-3 teachers x 1 +1319 ",
                                                         r"^  saving: .* \(exact potential .* %\)$"), needs=("data",)),
    # a build with and without early stopping on one vLLM CPU engine (its start: minutes here): opt-in, as below
    "early_stop": Smoke(("--problems", "2", "--n", "2", "--max-tokens", "8", "--target", "0"),
                        (r"^one batch +\d+ ", r"^rounds +\d+ ", r"^saving: .* same dataset content: True$",
                         r"^tokens/s rounds / one batch: "), needs=("vllm",), timeout_s=600),
    "humaneval_style_harness": Smoke(("{tmp}/programs.json", "2", "1"), (r'^\{"seconds": .*, "passed": \d+\}$',)),
    "incremental": Smoke(("grow:10", "overhead:8", "lookup:8", "--baseline", "."),
                         (r"sampling stage, \+10 % / from scratch: .*x", r"best of two: .* with, .* without",
                          r"verdicts: look-up .* this code / baseline .*x"), needs=("data", "services"),
                         timeout_s=600),
    "judge_overhead": Smoke(("--n", "4", "--delay-ms", "5", "--rounds", "1"),
                            (r"^pointwise +4 requests .* per candidate", r"^pairwise +8 requests .* per pair",
                             r"^pointwise raw / stage: .*x", r"^pairwise raw / stage: .*x"), needs=("data",)),
    "math_verify_throughput": Smoke(("--problems", "4",),
                                    (r"^GSM8K pool: 16 candidates$", r"^MATH-500 reference \+ perturbed: 8 candidates$",
                                     r"ratio: .*x", r"agreement with the labels: verdicts \d+/8, loop \d+/8"),
                                    needs=("data", "services")),
    # transformers and vLLM's CPU engine on the test reward model: vLLM's start makes it an opt-in run, as below
    "reward_model": Smoke(("--n", "2", "--max-length", "64"),
                          (r"^transformers +load .* scores/s", r"^vllm +load .* scores/s",
                           r"^vllm / transformers: .*x +largest score difference"), needs=("vllm",), timeout_s=600),
    "reward_scans": Smoke(("--chars", "2000", "--big", "20000"),
                          (r"^fence then spaces \(extraction\) .*x", r"^judgment then spaces \(genselect\) .*x",
                           r"^limit string with spaces \(load\) .*x")),
    "s3_requests": Smoke(("--parts", "3", "--rows", "16"),
                         (r"^3 parts of 16 verdicts on SeaweedFS .*PUT .* ms, footer GET .*commit with compaction",)),
    "s3_requests --verify": Smoke(("--verify", "4", "--baseline", "."),
                                  (r"^  baseline .* requests for 1 shards", r"^  this code .* requests for 1 shards")),
    "sandbox_startup": Smoke(("--against", ".", "-n", "1", "--rounds", "1"),
                             (r"^this tree +start .* s +close", r"^this tree / against: start .*x"), needs=("docker",)),
    "sandbox_throughput": Smoke(("--problems", "2", "--samples", "2", "--docker-run-samples", "1", "--overhead", "4",
                                 "--time-limit", "1", "--cpp", "1"),
                                (r"^warm pool / docker run: .*x", r"^warm pool / unisolated: .*x",
                                 r"^two 2 s programs on 2 slots: latencies", r"^four infinite loops on 2 slots",
                                 r"^CPU per candidate: warm pool .* ms",
                                 r"^  compile once: sandbox .* s, g\+\+ unisolated",
                                 r"^  per test: +sandbox .* ms, plain run"), needs=("data", "docker")),
    "scale": Smoke(("--sizes", "8", "--baseline", "."),
                   (r"^ +this code: stages .*peak RSS", r"speed-up: stages .*x .*same dataset content: True",
                    r"pass rate by teacher \(DuckDB via the catalog\)", r"bonforge report: .*s")),
    "verify_memory": Smoke(("--sizes", "4", "8", "--baseline", "."),
                           (r"^  baseline +8 problems", r"^  this code +8 problems \( +128 verdicts\): peak RSS")),
    "viewer": Smoke(("--problems", "8", "--repeat", "1"),
                    (r"^  first page .* ms", r"^  one problem \(16 candidates\) .* ms", r"^  last page .* ms",
                     r"^  sql box .* ms", r"^  the page's own assets")),
    # vLLM's CPU engine starts twice (the stage's, then raw vLLM's): 219 s for the first alone on the shared 2-core
    # machine at load 20, 9.5 min in all, so it runs only when asked (BONFORGE_SMOKE_VLLM=1); --target 0: no figure
    "vllm_engine": Smoke(("--problems", "2", "--n", "1", "--max-tokens", "8", "--target", "0"),
                         (r"^stage: 2 samples", r"^raw: +2 samples", r"^tokens/s  stage .* ratio"),
                         needs=("vllm",), timeout_s=600),
}


def scripts() -> set[str]:
    """The scripts in benchmarks/ (modules starting with ``_`` are shared helpers, not scripts)."""
    return {p.stem for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_")}


def test_every_script_has_a_smoke_run():
    smoked = {name.split()[0] for name in SMOKE}
    assert sorted(scripts() - smoked) == [], "add a tiny run of each new script to SMOKE"
    assert sorted(smoked - scripts()) == [], "SMOKE names a script that is gone"


@pytest.fixture(scope="session")
def services(tmp_path_factory) -> Iterator[dict[str, str]]:
    """One Prefect server and Ray head for the session's scripts (``bonforge up`` in a home of its own): the
    environment that points a build at them."""
    home = tmp_path_factory.mktemp("services-home")
    env = {**os.environ, "BONFORGE_HOME": str(home)}
    for name in ("PREFECT_API_URL", "RAY_ADDRESS"):
        env.pop(name, None)
    up = subprocess.run([sys.executable, "-m", "bonforge.cli", "up"], env=env, cwd=REPO, capture_output=True,
                        text=True, timeout=600)
    if up.returncode:
        pytest.fail(f"bonforge up failed:\n{up.stderr[-3000:]}")
    try:
        record = json.loads((home / "services.json").read_text())
        ray = record["ray"]
        yield {"PREFECT_API_URL": record["prefect"]["url"], "RAY_ADDRESS": ray["address"], "RAY_AUTH_MODE": "token",
               "RAY_AUTH_TOKEN_PATH": ray["token_path"]}
    finally:
        subprocess.run([sys.executable, "-m", "bonforge.cli", "down"], env=env, cwd=REPO, capture_output=True,
                       timeout=120)


def _needs(smoke: Smoke, request) -> dict[str, str]:
    """What the run needs, as fixtures (each skips, or fails where CI requires it); the environment it adds."""
    env: dict[str, str] = {}
    for need in smoke.needs:
        if need == "data":
            env["BONFORGE_DATA"] = str(request.getfixturevalue("data_dir"))
        elif need == "docker":
            request.getfixturevalue("sandbox_image")
        elif need == "vllm":
            if os.environ.get("BONFORGE_SMOKE_VLLM") != "1":
                pytest.skip("vLLM's CPU engine starts twice (minutes on 2 cores): set BONFORGE_SMOKE_VLLM=1 to run it")
            request.getfixturevalue("vllm_cpu")
        elif need == "services":
            env.update(request.getfixturevalue("services"))
    return env


def _run(argv: list[str], env: dict[str, str], timeout_s: int) -> tuple[int, str, str]:
    """``argv`` in a session of its own (whatever it starts is killed with it on a timeout)."""
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return -1, out, err + f"\n(killed after {timeout_s} s)"
    return proc.returncode, out, err


def _params():
    for name, smoke in SMOKE.items():
        marks = [pytest.mark.docker] if "docker" in smoke.needs else []
        yield pytest.param(name, smoke, id=name.replace(" --", "-"), marks=marks)


@pytest.mark.parametrize(("name", "smoke"), list(_params()))
def test_smoke(name: str, smoke: Smoke, request, tmp_path):
    (tmp_path / "programs.json").write_text(json.dumps(TWO_PROGRAMS))
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "RAY_ADDRESS")}
    env.update(BONFORGE_HOME=str(tmp_path / "home"), PREFECT_HOME=str(tmp_path / "prefect"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.setdefault("RAY_raylet_start_wait_time_s", "180")  # Ray's own start, on a busy 2-core machine
    env.update(_needs(smoke, request))
    args = [a.replace("{tmp}", str(tmp_path)) for a in smoke.args]
    code, out, err = _run([sys.executable, str(BENCHMARKS / f"{name.split()[0]}.py"), *args], env, smoke.timeout_s)
    tail = f"\n--- stdout ---\n{out[-3000:]}\n--- stderr ---\n{err[-3000:]}"
    assert code == 0, f"exit code {code}{tail}"
    missing = [p for p in smoke.prints if not re.search(p, out, re.M)]
    assert missing == [], f"no line matches {missing}{tail}"
