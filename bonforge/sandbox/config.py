"""Configuration of code verification: sandbox backend, limits, judge and extraction.

Fields marked ``exec_only`` (backend, pool size, recycling, retries, start-up) change how verification
runs, never a verdict, and stay out of the stage key.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, model_validator

from bonforge.config_model import Model, added, exec_only

OUTPUT_PER_EXPECTED = 2  # a problem's output cap is at least this many times its largest expected output


class CodeVerifyConfig(Model):
    """How candidates for code problems are extracted, run and judged."""

    backend: Literal["docker", "process"] = exec_only(
        "docker", description="'docker': a warm pool of isolated containers. 'process': the same runner "
        "on the host with rlimits, a uid of its own per worker when run as root and, when permitted, a new "
        "network namespace; it isolates far less (no filesystem, memory-cgroup or pid isolation): trusted "
        "pools only.")  # fmt: skip
    image: str | None = Field(
        None, description="Sandbox image tag (backend 'docker'); default bonforge-sandbox:<hash of the runner>.")
    transport: Literal["socket", "attach"] = exec_only(
        "socket", description="How the host talks to a container's runner (backend 'docker'): 'socket' = a "
        "Unix socket in a host directory mounted read-only into the container (fast; needs the Docker daemon "
        "on this host; with DOCKER_HOST naming a remote daemon, 'attach' is used); 'attach' = the container's "
        "attached stdin/stdout (works with a remote daemon, costs about 1 ms more CPU per candidate).")  # fmt: skip
    build_image: bool = exec_only(True, description="Build a missing image (no registry needed) instead of failing.")
    pool_size: int = Field(
        default_factory=lambda: os.cpu_count() or 1, gt=0, json_schema_extra={"exec_only": True},
        description="Containers (or runner processes) kept warm, each running one candidate at a time "
        "(default: the number of cores).")  # fmt: skip
    time_limit_s: float = Field(3.0, gt=0, le=600, description="CPU-time limit per test, seconds.")
    wall_factor: float = Field(
        2.0, ge=1.0, description="Wall-clock safety net per test: time_limit_s * wall_factor + 1 seconds.")
    memory_mb: int = Field(
        1024, ge=64, description="Address-space limit per test process, MiB (RLIMIT_AS); the container "
        "gets this plus tmpfs_mb plus 256 MiB for the runner.")  # fmt: skip
    candidate_wall_s: float = added(
        30.0, gt=0, le=3600, description="Wall-clock budget of one candidate, seconds: its tests run while it "
        "lasts, and those left when it runs out count as timeout. A candidate takes at most min(tests * "
        "(time_limit_s * wall_factor + 1), candidate_wall_s) in the sandbox; an assert-style check (one test "
        "whose program runs again when the check's calls depend on its answers) gets candidate_wall_s for all "
        "its runs.")  # fmt: skip
    output_limit_bytes: int = Field(
        1 << 20, gt=0, description="Cap per test on stdout and returned values together (else verdict "
        f"output_limit); a problem whose expected output is larger gets {OUTPUT_PER_EXPECTED} times the size of "
        "its largest.")  # fmt: skip
    tmpfs_mb: int = Field(64, gt=0, description="Size of the container's writable /tmp, MiB.")
    pids_limit: int = Field(
        128, ge=16, description="Processes and threads per container (its pids cgroup: --pids-limit); backend "
        "'process' run as root: RLIMIT_NPROC of each worker's own uid.")  # fmt: skip
    cpus_per_container: float = Field(1.0, gt=0, description="CPU quota per container (--cpus).")
    float_tolerance: float = Field(
        1e-6, ge=0, description="Absolute-or-relative tolerance when two numbers compared are not both integers.")
    case_insensitive: bool = Field(False, description="Compare non-numeric output tokens case-insensitively.")
    stop_on_first_failure: bool = Field(
        False, description="Stop a candidate at its first failing test; later tests count as not passed.")
    extraction: Literal["auto", "fenced", "prompt_completion", "raw"] = Field(
        "auto", description="Program from a candidate's text: 'fenced' = the last python code block; "
        "'prompt_completion' = the problem's question (HumanEval prompt) followed by the text; 'raw' = the "
        "text; 'auto' = a fenced block if any, else prompt_completion for assert-style tests, else raw.")  # fmt: skip
    recycle_after: int = exec_only(500, gt=0, description="Replace a container after this many candidates.")
    retries: int = exec_only(
        2, ge=0, description="Retries of a candidate whose sandbox failed, each on a fresh one, before sandbox_error.")
    startup_timeout_s: float = exec_only(60.0, gt=0, description="How long a new worker may take to be ready.")
    idle_close_s: float = exec_only(
        300.0, gt=0, description="A process's shared pool (the one reward functions and local verification use) "
        "stops its workers after this many seconds without a request; the next request starts them again.")
    detail_chars: int = Field(2000, ge=0, description="Characters of error text and stderr kept in a verdict's detail.")

    @model_validator(mode="after")
    def _image_needs_docker(self) -> CodeVerifyConfig:
        if self.backend == "process" and self.image is not None:
            raise ValueError("image applies only to backend 'docker' (backend is 'process')")
        return self

    def output_limit(self, expected_bytes: int) -> int:
        """The output cap of a problem whose largest expected output (stdout, or a returned value's JSON)
        takes ``expected_bytes``: a legal answer of any size passes, a flood of output does not. Only this
        number enters the sandbox, never the expected output."""
        return max(self.output_limit_bytes, OUTPUT_PER_EXPECTED * expected_bytes)

    @property
    def wall_limit_s(self) -> float:
        return self.time_limit_s * self.wall_factor + 1.0
