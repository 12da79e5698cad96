"""Configuration of code verification: sandbox backend, limits, judge and extraction."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class CodeVerifyConfig(BaseModel):
    """How candidates for code problems are extracted, run and judged.

    Fields that change verdicts (limits, judge, extraction) belong in the stage key; ``pool_size``,
    ``recycle_after``, ``retries`` and ``startup_timeout`` are execution-only (see ``EXECUTION_ONLY``).
    """

    model_config = ConfigDict(extra="forbid")

    backend: Literal["docker", "process"] = "docker"
    """'docker': warm pool of isolated containers. 'process': the same runner run directly on the host
    with rlimits and (when permitted) a new network namespace; it isolates far less: trusted pools only."""

    image: str | None = None
    """Sandbox image tag; default ``bonforge-sandbox:<hash of the runner>`` (built when missing)."""

    build_image: bool = True
    """Build the image when it is missing (no registry needed) instead of failing."""

    pool_size: int = Field(default_factory=lambda: os.cpu_count() or 1, gt=0)
    """Containers (or runner processes) kept warm; each runs one candidate at a time."""

    time_limit_s: float = Field(default=3.0, gt=0, le=600)
    """CPU-time limit per test, seconds."""

    wall_factor: float = Field(default=2.0, ge=1.0)
    """Wall-clock safety net per test: ``time_limit_s * wall_factor + 1`` seconds (sleeping programs)."""

    memory_mb: int = Field(default=1024, ge=64)
    """Address-space limit per test process, MiB (RLIMIT_AS); the container gets this plus headroom."""

    output_limit_bytes: int = Field(default=1 << 20, gt=0)
    """Stdout cap per test; exceeding it gives ``output_limit``."""

    tmpfs_mb: int = Field(default=64, gt=0)
    """Size of the container's writable /tmp, MiB."""

    pids_limit: int = Field(default=128, ge=16)
    """Processes and threads per container (docker ``--pids-limit``)."""

    cpus_per_container: float = Field(default=1.0, gt=0)
    """CPU quota per container (docker ``--cpus``)."""

    float_tolerance: float = Field(default=1e-6, ge=0)
    """Absolute-or-relative tolerance when both tokens (or values) are numbers and one is a float."""

    case_insensitive: bool = False
    """Compare non-numeric output tokens case-insensitively."""

    stop_on_first_failure: bool = False
    """Stop a candidate at its first failing test; later tests count as not passed."""

    extraction: Literal["auto", "fenced", "prompt_completion", "raw"] = "auto"
    """How the program is taken from a candidate's text: 'fenced' = last ```python block; 'prompt_completion'
    = the problem's question (the HumanEval prompt) followed by the text; 'raw' = the text as is; 'auto' =
    fenced block if any, else prompt+completion for assert-style problems, else raw."""

    recycle_after: int = Field(default=500, gt=0)
    """Replace a container after this many candidates (also after any anomaly)."""

    retries: int = Field(default=2, ge=0)
    """Retries of a candidate whose sandbox failed, each on a fresh container, before ``sandbox_error``."""

    startup_timeout_s: float = Field(default=60.0, gt=0)
    """How long a new container or runner may take to say it is ready."""

    detail_chars: int = Field(default=2000, ge=0)
    """Characters of stderr / error text kept in a verdict's ``detail``."""

    @model_validator(mode="after")
    def _check(self) -> CodeVerifyConfig:
        if self.backend == "process" and self.image is not None:
            raise ValueError("image applies only to backend 'docker' (backend is 'process')")
        return self

    @property
    def wall_limit_s(self) -> float:
        return self.time_limit_s * self.wall_factor + 1.0


EXECUTION_ONLY = frozenset({"pool_size", "recycle_after", "retries", "startup_timeout_s", "build_image"})
"""Fields that never change a verdict: leave them out of the stage key."""
