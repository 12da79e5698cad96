"""The code judge's requests (``judging.code``): from a problem's test spec and a candidate's program to the
runner's request (inputs and limits only: expected outputs and checks never enter the sandbox), with the
problem's own limits capped by the recipe's and the program's language."""

from __future__ import annotations

import json
import math

from bonforge.judging.spec import TestSpec
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.languages import LANGUAGES, PYTHON, language_of, native_fields
from bonforge.sandbox.wire import Build, Limits, Request, wall_limit


def time_limit_s(spec: TestSpec, cfg: CodeVerifyConfig) -> float:
    """The per-test CPU limit: the problem's own when it is a finite positive number under the recipe's,
    else the recipe's (a problem's data never raises the recipe's bound, and a bad value never raises)."""
    own = spec.time_limit_s
    if isinstance(own, (int, float)) and not isinstance(own, bool) and math.isfinite(own) and 0 < own:
        return min(float(own), cfg.time_limit_s)
    return cfg.time_limit_s


def memory_mb(spec: TestSpec, cfg: CodeVerifyConfig) -> int:
    """A test's memory limit, MiB: the spec's ``memory_mb`` (a loader writes a table's limit there), capped by the
    recipe's ``memory_mb`` (the sandbox is sized for it); the recipe's when the problem names none."""
    own = spec.memory_mb
    if isinstance(own, (int, float)) and not isinstance(own, bool) and math.isfinite(own) and own > 0:
        return max(16, min(int(own), cfg.memory_mb))
    return cfg.memory_mb


def budget_s(spec: TestSpec, cfg: CodeVerifyConfig, language: str = "python") -> float:
    """A candidate's wall-clock budget over all its tests (and all runs of an assert-style check)."""
    if spec.kind == "assert":
        return cfg.candidate_wall_s
    limit = time_limit_s(spec, cfg) * cfg.time_multiplier(language)
    return min(len(spec.inputs) * wall_limit(limit, cfg.wall_factor), cfg.candidate_wall_s)


def build_request(
    spec: TestSpec, program: str, cfg: CodeVerifyConfig, request_id: str, plan: list | None = None, go_on: bool = False,
    language: str = "python",
) -> dict:
    """The runner request for one candidate, made as a ``wire.Request`` (its fields checked) and given as its JSON
    object (inputs only: expected outputs and checks stay out of the sandbox); ``plan``: the calls an
    assert-style check makes (``CheckHost.plan``); ``language``: a name of ``languages.LANGUAGES`` (a compiled
    language is built once, before its tests, under its own limits)."""
    limit = time_limit_s(spec, cfg) * cfg.time_multiplier(language)
    memory = memory_mb(spec, cfg)
    if spec.kind == "stdio":
        tests = [{"input": i} for i in spec.inputs]
    elif spec.kind == "call":
        tests = [{"args": a} for a in spec.inputs]
    else:
        tests = [{"calls": plan or [], "go_on": go_on}]
    native = {}
    if language != PYTHON.name:
        native = native_fields(LANGUAGES[language], program, memory, cfg.build_limits().fields(), spec.include)
        native["build"] = Build(**native["build"]) if "build" in native else None
    return Request(
        request_id, spec.kind, tests, program=program, prelude=spec.prelude,
        fn_name=spec.entry_point if spec.kind == "assert" else spec.fn_name,
        **Limits(limit, cfg.wall_factor, memory, cfg.output_limit(expected_bytes(spec))).fields(),
        budget=budget_s(spec, cfg, language), stop_on_failure=cfg.stop_on_first_failure, **native,
    ).doc()  # fmt: skip


def expected_bytes(spec: TestSpec) -> int:
    """The size of the spec's largest expected output (its output cap grows with it)."""
    sizes = [len(o.encode("utf-8", "surrogatepass")) if isinstance(o, str) else len(json.dumps(o))
             for o in spec.outputs or ()]  # fmt: skip
    return max(sizes, default=0)


def program_language(named: str | None, tag: str | None, spec: TestSpec, cfg: CodeVerifyConfig) -> tuple[str, str]:
    """(the program's language, "") or ("", why it cannot run): the record's ``language`` when it names one,
    else the fence's tag, else the recipe's ``default_language``. Only Python runs call and assert tests."""
    if named:
        lang = language_of(named)
        if lang is None:
            return "", f"the candidate names an unknown language {named[:40]!r} (known: {', '.join(LANGUAGES)})"
    else:
        lang = language_of(tag) or LANGUAGES[cfg.default_language]
    if spec.kind != "stdio" and lang is not PYTHON:
        return "", f"a {lang.name} program cannot run {spec.kind}-style tests (they call Python functions)"
    return lang.name, ""
