"""Output comparison (the host side: expected outputs never enter the sandbox).

stdio: both outputs are split on whitespace into tokens (so line breaks and spacing do not matter, but a
missing or extra line changes the token count and fails: outputs are never zipped line by line). Token
pairs match when both are integers and equal exactly; else when both are numbers (one a float) and
``|a - b| <= tol`` or ``|a - b| <= tol * |expected|``; else when the strings are equal (case-folded with
``case_insensitive``).

call: the returned value, after a JSON round trip (tuples become lists), equals the expected JSON value
recursively (numbers as above, bools only equal bools). APPS call-based files sometimes wrap the return
value in a one-element list (``"outputs": [[false]]`` for a function returning ``False``) and sometimes not
(``[9]``), so, as the APPS harness does, a value also passes when the expected value is a non-empty list
whose first element matches it.
"""

from __future__ import annotations

import math
import re

_INT = re.compile(r"[+-]?\d+\Z")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\Z")


def _int_key(token: str) -> tuple[bool, str]:
    """An integer token as (negative, digits without leading zeros): exact comparison at any length,
    with no conversion (``int()`` refuses more than 4,300 digits)."""
    digits = token.lstrip("+-").lstrip("0")
    return token.startswith("-") and bool(digits), digits


def _numbers_close(a: float, b: float, tol: float) -> bool:
    if not (math.isfinite(a) and math.isfinite(b)):
        return a == b
    diff = abs(a - b)
    return diff <= tol or diff <= tol * abs(b)


def tokens_match(got: str, expected: str, tol: float = 1e-6, case_insensitive: bool = False) -> bool:
    g, e = got.split(), expected.split()
    if len(g) != len(e):
        return False
    for a, b in zip(g, e, strict=True):
        if a == b:
            continue
        if _INT.match(a) and _INT.match(b):
            if _int_key(a) != _int_key(b):
                return False
        elif _FLOAT.match(a) and _FLOAT.match(b):
            if not _numbers_close(float(a), float(b), tol):
                return False
        elif not (case_insensitive and a.casefold() == b.casefold()):
            return False
    return True


def json_equal(got, expected, tol: float = 1e-6) -> bool:
    if isinstance(got, bool) or isinstance(expected, bool):
        return isinstance(got, bool) and isinstance(expected, bool) and got == expected
    if isinstance(got, (int, float)) and isinstance(expected, (int, float)):
        if isinstance(got, int) and isinstance(expected, int):
            return got == expected
        return _numbers_close(float(got), float(expected), tol)
    if isinstance(got, list) and isinstance(expected, list):
        return len(got) == len(expected) and all(json_equal(a, b, tol) for a, b in zip(got, expected, strict=True))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(json_equal(got[k], expected[k], tol) for k in got)
    return type(got) is type(expected) and got == expected


def value_matches(got, expected, tol: float = 1e-6) -> bool:
    """Call-based comparison, including the APPS one-element-list wrapping (see module docstring)."""
    if json_equal(got, expected, tol):
        return True
    return isinstance(expected, list) and len(expected) == 1 and json_equal(got, expected[0], tol)
