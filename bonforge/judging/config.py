"""The maths judge's recipe model (``verify.math``) beside the code that reads it (``judging/math_rules.py``), as
``sandbox/config.py`` holds the code judge's."""

from __future__ import annotations

from pydantic import Field, model_validator

from bonforge.config_model import Model, exec_only


class MathVerifyConfig(Model):
    """Answer extraction and checking, both by math-verify (``parse``, then ``verify(gold, pred)``)."""

    patterns: list[str] = Field(
        default_factory=list,
        description="Regexes tried in order before math-verify's own extraction; group 1 (else the whole "
                    "match) of the last match of the first pattern that matches is the answer. GSM8K: `A: x`.",
    )
    boxed_match_priority: int = Field(
        0, ge=-1, description="math-verify's priority of \\boxed{} answers: 0 = before any other form, "
                              "50 = after 'final answer is ...' (its default), -1 = ignore boxes.")
    last_number: bool = Field(
        True, description="When math-verify finds nothing in a text without LaTeX, take its last number.")
    choices: list[str] | None = Field(
        None, min_length=2, description="Multiple choice: the option letters (e.g. [A, B, C, D]); answers "
                                        "and gold are then read as one of these letters only.")
    float_rounding: int = Field(6, ge=0, description="Decimal places floats are rounded to before comparing.")
    numeric_precision: int = Field(15, gt=0, description="Significant digits of numeric evaluation.")
    strict: bool = Field(True, description="math-verify's strict mode: variable names matter and a set never "
                                           "equals a tuple (off: variables match by position, sets equal tuples).")
    allow_set_relation_comp: bool = Field(
        False, description="Let a gold set or interval equal the matching relation (e.g. (1, 2) vs 1 < x < 2); "
                           "off, only a predicted set compares with a gold relation.")
    timeout_s: float = exec_only(5.0, gt=0, description="Hard wall-clock limit per item (verdict `timeout`).")
    workers: int | None = exec_only(None, gt=0, description="Parallel verifier processes (default: CPUs).")

    @model_validator(mode="after")
    def _distinct_choices(self) -> "MathVerifyConfig":
        if self.choices and len(set(self.choices)) != len(self.choices):
            raise ValueError(f"choices must be distinct (got {self.choices})")
        return self
