"""Output comparison (the host side: expected outputs never enter the sandbox).

stdio: both outputs are split on ASCII whitespace (space, tab, CR, LF, VT, FF) into tokens, so line
breaks, ``\\r\\n`` and spacing do not matter, but a missing or extra line changes the token count and fails
(outputs are never zipped line by line). Each pair (got, expected) then matches by the expected token:

* identical bytes always match;
* an **integer** expected (``[+-]?[0-9]+``): got must be an integer token with the same value, compared
  as digit strings (sign and leading zeros normalised, ``-0`` equals ``0``; no conversion, so any length
  works): ``5.0000004``, ``5.0`` and ``5e0`` do not match ``5``;
* a **float** expected (ASCII digits with a ``.`` and/or an exponent): got must be a number token (integer
  or float) within ``tol`` absolute or ``tol * |expected|`` relative; values beyond the float range
  (about 1.8e308) compare as infinities of their sign;
* anything else: equal strings (case-folded with ``case_insensitive``).

Only ASCII digits make numbers: ``５`` or ``٥`` is a word, equal only to itself.

call: the returned value, after a JSON round trip (tuples become lists), equals the expected JSON value
recursively: bools only equal bools; an integer expected is matched exactly (by an equal integer, or a
float of exactly that value, as Python's ``==`` decides without conversion); a float expected is matched
within the tolerance above; strings, ``null``, lists (same length, in order) and objects (same keys)
compare as such. APPS call-based files sometimes wrap the return value in a one-element list (``"outputs":
[[false]]`` for a function returning ``False``) and sometimes not (``[9]``), so for specs of that format
(``wrapped_outputs``, set by the APPS converter), as the APPS harness does, a value also passes when the
expected value is a one-element list whose element matches it. Every other format compares strictly:
``1`` does not pass where ``[1]`` is expected.
"""

from __future__ import annotations

import math
import re

_INT = re.compile(rb"[+-]?[0-9]+\Z")
# Unambiguous (digits after the point only after a point): matching any token takes linear time
_NUMBER = re.compile(rb"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")


def _as_float(x) -> float:
    """A number (int, float, or a number token) as a float; out of range becomes an infinity."""
    try:
        return float(x)
    except OverflowError:  # an int beyond the float range (tokens saturate to inf by themselves)
        return math.inf if x > 0 else -math.inf


def _numbers_close(a: float, b: float, tol: float) -> bool:
    if not (math.isfinite(a) and math.isfinite(b)):
        return a == b
    diff = abs(a - b)
    return diff <= tol or diff <= tol * abs(b)


def _int_key(token: bytes) -> bytes:
    """An integer token's value as a canonical digit string (no conversion: any length)."""
    negative = token[:1] == b"-"
    digits = token.lstrip(b"+-").lstrip(b"0") or b"0"
    return b"-" + digits if negative and digits != b"0" else digits


def _token_matches(got: bytes, expected: bytes, tol: float, case_insensitive: bool) -> bool:
    if got == expected:
        return True
    if _INT.match(expected):
        return bool(_INT.match(got)) and _int_key(got) == _int_key(expected)
    if _NUMBER.match(expected):
        return bool(_NUMBER.match(got)) and _numbers_close(float(got), float(expected), tol)
    return case_insensitive and got.decode(errors="replace").casefold() == expected.decode(errors="replace").casefold()


def tokens_match(got: str, expected: str, tol: float = 1e-6, case_insensitive: bool = False) -> bool:
    g = got.encode("utf-8", "surrogatepass").split()  # bytes.split: ASCII whitespace only
    e = expected.encode("utf-8", "surrogatepass").split()
    return len(g) == len(e) and all(_token_matches(a, b, tol, case_insensitive) for a, b in zip(g, e, strict=True))


def json_equal(got, expected, tol: float = 1e-6) -> bool:
    if isinstance(got, bool) or isinstance(expected, bool):
        return isinstance(got, bool) and isinstance(expected, bool) and got == expected
    if isinstance(expected, int):
        return isinstance(got, (int, float)) and got == expected  # exact, as Python compares int and float
    if isinstance(expected, float):
        return isinstance(got, (int, float)) and _numbers_close(_as_float(got), expected, tol)
    if isinstance(got, list) and isinstance(expected, list):
        return len(got) == len(expected) and all(json_equal(a, b, tol) for a, b in zip(got, expected, strict=True))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(json_equal(got[k], expected[k], tol) for k in got)
    return type(got) is type(expected) and got == expected


def value_matches(got, expected, tol: float = 1e-6, wrapped: bool = False) -> bool:
    """Call-based comparison; ``wrapped``: the APPS one-element-list leniency (see module docstring)."""
    if json_equal(got, expected, tol):
        return True
    return wrapped and isinstance(expected, list) and len(expected) == 1 and json_equal(got, expected[0], tol)
