"""Configuration of code verification: sandbox backend, limits, judge and extraction.

Fields marked ``exec_only`` (backend, pool size, recycling, retries, start-up) change how verification
runs, never a verdict, and stay out of the stage key.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, field_validator, model_validator

from bonforge.config_model import Model, added, exec_only
from bonforge.sandbox.languages import LANGUAGES, language_of
from bonforge.sandbox.wire import Limits, wall_limit

DEFAULT_TIME_MULTIPLIERS = {"python": 1.0, "cpp": 1.0, "java": 2.0, "pypy": 2.0}
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
        1024, ge=64, description="Memory limit per test, MiB: of all its processes and the files it writes in "
        "memory (a memory cgroup per test, where the Docker engine allows one; else the address space of each "
        "process, RLIMIT_AS); the container gets this plus tmpfs_mb plus 256 MiB for the runner.")  # fmt: skip
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
    default_language: str = added(
        "python", description="Language of a program whose fence has no language tag and whose record names "
        "none: python, cpp (C++17, g++), java (OpenJDK) or pypy (PyPy 3); also their tags (c++, py, pypy3, "
        "...).")  # fmt: skip
    time_multipliers: dict[str, float] = added(
        dict(DEFAULT_TIME_MULTIPLIERS), description="Per-language factor on a test's time limit (the problem's, "
        "capped by time_limit_s) and its wall limit: {language: factor}; a language left out gets 1. Defaults: "
        "java 2 (a JVM's start-up is CPU time), pypy 2 (its JIT warms up), python and cpp 1.")  # fmt: skip
    build_time_limit_s: float = added(
        30.0, gt=0, le=600, description="CPU-time limit of compiling one candidate (C++, Java; PyPy's syntax check), "
        "seconds; its wall limit is this * wall_factor + 1. Over it: compile_error (a build the machine kept from "
        "finishing: infra_error, bonforge/sandbox/README.md).")  # fmt: skip
    build_output_bytes: int = added(
        1 << 16, gt=0, description="Cap on a compiler's output (its messages; a build past it is a compile_error).")

    @field_validator("default_language")
    @classmethod
    def _known_language(cls, v: str) -> str:
        lang = language_of(v)
        if lang is None:
            raise ValueError(f"unknown language {v!r}; choose one of {', '.join(LANGUAGES)}")
        return lang.name

    @field_validator("time_multipliers")
    @classmethod
    def _known_languages(cls, v: dict[str, float]) -> dict[str, float]:
        out = {}
        for name, factor in v.items():
            lang = language_of(name)
            if lang is None:
                raise ValueError(f"time_multipliers: unknown language {name!r}; choose from {', '.join(LANGUAGES)}")
            if not (0 < factor <= 100):
                raise ValueError(f"time_multipliers: {name}'s factor must be in (0, 100], got {factor}")
            out[lang.name] = float(factor)
        return out

    def time_multiplier(self, language: str) -> float:
        return self.time_multipliers.get(language, 1.0)

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
        return wall_limit(self.time_limit_s, self.wall_factor)

    def limits(self) -> Limits:
        """A test's limits under this recipe alone (no problem's own)."""
        return Limits(self.time_limit_s, self.wall_factor, self.memory_mb, self.output_limit_bytes)

    def build_limits(self) -> Limits:
        """A candidate's build's limits (C++, Java; PyPy's syntax check)."""
        return Limits(self.build_time_limit_s, self.wall_factor, self.memory_mb, self.build_output_bytes)
