"""Every script in ``benchmarks/`` runs at a tiny size: a smoke run, so that none breaks unseen when the code
it measures changes. Each runs as a user runs it (``python benchmarks/<script>.py ...`` from the repository
root, in a process of its own) and must exit 0 and print its table or ratio line; no figure is asserted.

The scripts that build with Prefect and Ray use one Prefect server and Ray head for the session (conftest's
``services``: ``bonforge up`` in a temporary home, handed over as ``PREFECT_API_URL`` and ``RAY_ADDRESS``), as a
configured cluster gives them, and ``dag_overhead``'s builds with the warm services use that ``bonforge up``
(``--warm-home``): their own start of these services is what tests/services covers, and on a 2-core machine it
would cost more than the scripts' work.

The scripts that load a vLLM engine (``vllm_engine``, ``reward_model``, ``early_stop`` past its pools) run
inside the real-model tests that load the same engine already (``bench_smoke.ON_ENGINE``): a start of their
own costs minutes here."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from bench_smoke import ON_ENGINE

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
TWO_PROGRAMS = ["def f(x):\n    return x + 1\nassert f(1) == 2\n", "assert 1 == 2\n"]  # one passes, one fails


@dataclass(frozen=True)
class Smoke:
    """A tiny run of one script: its arguments (``{tmp}``: the test's temporary folder; ``{warm}``: the home of
    the session's ``bonforge up``, with "services"), the lines it must print (regular expressions, each matching
    a line), and what it needs."""

    args: tuple[str, ...]
    prints: tuple[str, ...]
    needs: tuple[str, ...] = ()  # "data" (the mirror), "docker", "services" (the session's Prefect and Ray)
    timeout_s: int = 300


SMOKE = {
    "adaptive_window": Smoke(("--problems", "4", "--delay", "0.05"),
                             (r"^adaptive \(max 64\) +[\d.]+% +\d+ +0 ", r"^fixed 32 \(before\) +[\d.]+% ",
                              r"^told the server's limit +[\d.]+% ", r"^adaptive / told: [\d.]+x")),
    "check_isolation": Smoke(("--against", ".", "-n", "2", "-c", "2", "--rounds", "1"),
                             (r"^this tree +plan .* ms +replay .* ms$", r"^this tree / against: plan .*x"),
                             needs=("docker",)),
    "dag_overhead": Smoke(("--problems", "12", "--changes", "1", "--warm-home", "{warm}"),
                          (r"^start: imports ", r"^DAG: .* = .*x", r"^`bonforge run`: first .*, cached re-run ",
                           r"^filter change .* with it \(median of 1, "), needs=("data", "services"), timeout_s=600),
    "decontaminate": Smoke(("--problems", "500", "--items", "20", "--planted", "5"),
                           (r"^stage \(vectorised, with dedup\): ", r"^ratio python / stage: .*same problems dropped")),
    "near_dedup": Smoke(("--problems", "2000",), (r"^near_dedup: 2,000 problems in .* rows/s\), .* load average ",
                                                 r"^planted found: \d+/20; false drops: \d+; controls merged: ")),
    "diff": Smoke(("--candidates", "1000", "--rounds", "1"),
                  (r"^diff of 1,000 candidates judged twice: cold .* s, median of 1 .* s \(CPU .*x of it$",
                   r"^  flipped .* kappa .*; problems: pass rate changed in ",
                   r"^re-judge count at commit \(1,000 verdicts judged again, .*\): .* s \(CPU .* s\); "
                   r"re-judged 1,000")),
    "early_stop --pools-only": Smoke(("--pools-only",), (r"^GSM8K, 4 GPT-3 teachers x 1 +1319 ",
                                                         r"^  saving: .* \(exact potential .* %\)$"), needs=("data",)),
    "humaneval_style_harness": Smoke(("{tmp}/programs.json", "2", "1"), (r'^\{"seconds": .*, "passed": \d+\}$',)),
    "incremental": Smoke(("grow:10", "overhead:8", "lookup:8", "--baseline", "."),
                         (r"sampling stage, \+10 % / from scratch: .*x", r"best of two: .* with, .* without",
                          r"verdicts: look-up .* this code / baseline .*x"), needs=("data", "services"),
                         timeout_s=600),
    "judge_overhead": Smoke(("--n", "4", "--delay-ms", "5", "--rounds", "1"),
                            (r"^pointwise +4 requests .* per candidate", r"^pairwise +8 requests .* per pair",
                             r"^pointwise raw / stage: .*x", r"^pairwise raw / stage: .*x"), needs=("data",)),
    "load_flips": Smoke(("--problems", "2", "--samples", "1", "--busy-per-core", "1", "--packages", "1"),
                        (r"^  idle +2 cands .* infra_error +\d+ +runs alone", r"^  loaded +2 cands ",
                         r"^  flips idle -> loaded: \d+ of 2; ", r"^  idle: \d+ of 2 solutions as info.toml says; ",
                         r"^  loaded: \d+ of 2 solutions as info.toml says; "), needs=("data", "docker"),
                        timeout_s=600),
    "math_verify_throughput": Smoke(("--problems", "4",),
                                    (r"^GSM8K pool: 16 candidates$", r"^MATH-500 reference \+ perturbed: 8 candidates$",
                                     r"ratio: .*x", r"agreement with the labels: verdicts \d+/8, loop \d+/8"),
                                    needs=("data", "services")),
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
    "scale --streaming": Smoke(("--sizes", "8", "--streaming"),
                               (r"^ +this code: stages .*peak RSS", r"bonforge report: .*s")),
    "streaming": Smoke(("--problems", "4", "--shard-problems", "2"),
                       (r"^barrier +[\d.]+ +[\d.]+ ", r"^streaming +[\d.]+ +[\d.]+ ", r"^same dataset bytes: yes"),
                       needs=("data", "docker"), timeout_s=900),
    "verify_memory": Smoke(("--sizes", "8", "--baseline", "."),
                           (r"^  baseline +8 problems", r"^  this code +8 problems \( +128 verdicts\): peak RSS")),
    "viewer": Smoke(("--problems", "8", "--repeat", "1"),
                    (r"^  first page .* ms", r"^  one problem \(16 candidates\) .* ms", r"^  last page .* ms",
                     r"^  sql box .* ms", r"^  the page's own assets")),
}


def scripts() -> set[str]:
    """The scripts in benchmarks/ (modules starting with ``_`` are shared helpers, not scripts)."""
    return {p.stem for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_")}


def test_every_script_has_a_smoke_run():
    smoked = {name.split()[0] for name in SMOKE} | set(ON_ENGINE)
    assert sorted(scripts() - smoked) == [], "add a tiny run of each new script to SMOKE (or bench_smoke.ON_ENGINE)"
    assert sorted(smoked - scripts()) == [], "SMOKE or bench_smoke.ON_ENGINE names a script that is gone"


@pytest.mark.parametrize("script", sorted(ON_ENGINE))
def test_the_scripts_that_load_vllm_are_run_by_a_real_model_test(script):
    """The test that ``bench_smoke.ON_ENGINE`` names exists and runs that script's smoke run."""
    path, function = ON_ENGINE[script].test.split("::")
    source = (REPO / path).read_text()
    body = source.partition(f"\ndef {function}(")[2].partition("\ndef ")[0]
    assert body, f"{path} has no test {function}"
    assert f'"{script}"' in body and "bench_smoke.unprinted" in body, f"{function} does not run the smoke of {script}"


def _needs(smoke: Smoke, request) -> dict[str, str]:
    """What the run needs, as fixtures (each skips, or fails where CI requires it); the environment it adds."""
    env: dict[str, str] = {}
    for need in smoke.needs:
        if need == "data":
            env["BONFORGE_DATA"] = str(request.getfixturevalue("data_dir"))
        elif need == "docker":
            request.getfixturevalue("sandbox_image")
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
    warm = str(request.getfixturevalue("warm_home")) if "services" in smoke.needs else ""
    args = [a.replace("{tmp}", str(tmp_path)).replace("{warm}", warm) for a in smoke.args]
    code, out, err = _run([sys.executable, str(BENCHMARKS / f"{name.split()[0]}.py"), *args], env, smoke.timeout_s)
    tail = f"\n--- stdout ---\n{out[-3000:]}\n--- stderr ---\n{err[-3000:]}"
    assert code == 0, f"exit code {code}{tail}"
    missing = [p for p in smoke.prints if not re.search(p, out, re.M)]
    assert missing == [], f"no line matches {missing}{tail}"
