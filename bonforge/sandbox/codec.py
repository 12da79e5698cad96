"""The value codec of the sandbox's wire: Python values as plain, type-tagged JSON and back.

Standard library only: the runner's child encodes what a program returns (``call`` and ``assert`` kinds), the
host and the check server decode it (``decode_value``: builtin values only, bounded). In the image beside
``runner.py``; imported as ``codec`` there and as ``bonforge.sandbox.codec`` on the host.
"""

import builtins
import json
import re

VALUE_DEPTH = 64  # nesting a value may have on the channel (deeper: not expressible)
ITER_ITEMS = 1_000_000  # items a returned generator or iterator may yield
_RAW_INT = 1 << 63  # integers below this in magnitude travel as plain JSON numbers
_TAGS_SEQ = {"l": list, "t": tuple, "s": set, "fs": frozenset}
_HEX = re.compile(r"-?[0-9a-f]+\Z")
_FLOAT = re.compile(r"-?(inf|nan|[0-9]+(\.[0-9]*)?(e[+-]?[0-9]+)?)\Z")


class Opaque:
    """A value the channel cannot carry (an object of a type that is not builtin data): equal to nothing."""

    __slots__ = ("kind",)

    def __init__(self, kind):
        self.kind = str(kind)[:100]

    def __repr__(self):
        return f"<{self.kind} object>"


def encode_value(v, depth=0):
    """The plain, type-tagged JSON form of ``v``: None, bools, strings, floats and integers under 2**63 as
    JSON; ``["i", hex digits]`` (other integers, and int subclasses), ``["f", repr]`` (float subclasses),
    ``["c", [re, im]]``, ``["b" | "ba", hex]`` (bytes, bytearray),
    ``["l" | "t" | "s" | "fs", [items]]``, ``["d", [[key, value], ...]]``, ``["r", [start, stop, step]]``
    (a range), ``["it", [items]]`` (a generator or iterator, run to its end here: it arrives as an iterator
    over those items), ``["?", type name]`` for anything else. Subclasses are read through their builtin
    base (their overrides never run), so an ``int`` subclass travels as its integer and an object cannot
    bring its own ``__eq__``."""
    if depth > VALUE_DEPTH:
        raise ValueError(f"nested deeper than {VALUE_DEPTH}")
    t = type(v)
    if v is None or v is True or v is False or t is str or t is float or t is int and -_RAW_INT < v < _RAW_INT:
        return v  # plain JSON: exact (JSON tells 1 from 1.0; floats as repr, inf and nan included)
    if issubclass(t, int):
        return ["i", int.__format__(v, "x")]
    if issubclass(t, float):
        return ["f", float.__repr__(v)]
    if issubclass(t, str):
        return str.__str__(v)
    if issubclass(t, complex):
        return ["c", [float.__repr__(complex.real.__get__(v)), float.__repr__(complex.imag.__get__(v))]]
    if issubclass(t, (bytes, bytearray)):
        return ["b" if issubclass(t, bytes) else "ba", (bytes if issubclass(t, bytes) else bytearray).hex(v)]
    for tag, base in _TAGS_SEQ.items():
        if issubclass(t, base):
            return [tag, [encode_value(x, depth + 1) for x in base.__iter__(v)]]
    if issubclass(t, dict):
        return ["d", [[encode_value(k, depth + 1), encode_value(x, depth + 1)] for k, x in dict.items(v)]]
    if t is range:
        return ["r", [encode_value(v.start), encode_value(v.stop), encode_value(v.step)]]
    if hasattr(t, "__next__") and hasattr(t, "__iter__"):  # a generator or iterator: what it yields
        items = []
        for x in v:
            if len(items) >= ITER_ITEMS:
                raise ValueError(f"an iterator of more than {ITER_ITEMS} items")
            items.append(encode_value(x, depth + 1))
        return ["it", items]
    try:
        name = str.__str__(type.__dict__["__name__"].__get__(t))
    except Exception:
        name = "object"
    return ["?", name]


HASH_COLLISIONS = 1000  # keys of one set or dict that may share a hash with another key


def _few_collisions(keys):
    """``keys``, unless more than ``HASH_COLLISIONS`` of them share hashes (integers a multiple of 2**61 - 1
    apart hash alike: a set of thousands of them takes quadratic time to build); ``ValueError`` then."""
    if len(keys) - len({hash(k) for k in keys}) > HASH_COLLISIONS:
        raise ValueError("set or dict keys crafted to share hashes")
    return keys


def decode_value(x, depth=0):
    """The inverse of ``encode_value`` for input from an untrusted side: builtin values only, nesting
    bounded, every tag and digit string checked; ``ValueError`` for anything else."""
    if depth > VALUE_DEPTH + 1:
        raise ValueError("value nested too deeply")
    if x is None or x is True or x is False or type(x) in (str, int, float):
        return x
    if type(x) is not list or len(x) != 2 or type(x[0]) is not str:
        raise ValueError("not a tagged value")
    tag, body = x
    if tag == "i" and type(body) is str and _HEX.match(body):
        return int(body, 16)
    if tag == "f" and type(body) is str and len(body) < 40 and _FLOAT.match(body):
        return float(body)
    if tag == "c" and type(body) is list and len(body) == 2:
        return complex(decode_value(["f", body[0]], depth), decode_value(["f", body[1]], depth))
    if tag in ("b", "ba") and type(body) is str:
        return (bytes if tag == "b" else bytearray).fromhex(body)
    if tag in _TAGS_SEQ and type(body) is list:
        items = [decode_value(v, depth + 1) for v in body]
        return _TAGS_SEQ[tag](_few_collisions(items) if tag in ("s", "fs") else items)
    if tag == "d" and type(body) is list:
        if not all(type(pair) is list and len(pair) == 2 for pair in body):
            raise ValueError("not a dict item")
        keys = _few_collisions([decode_value(pair[0], depth + 1) for pair in body])
        return dict(zip(keys, [decode_value(pair[1], depth + 1) for pair in body], strict=True))
    if tag == "r" and type(body) is list and len(body) == 3:
        return range(*(decode_value(x, depth + 1) for x in body))
    if tag == "it" and type(body) is list:
        return iter([decode_value(v, depth + 1) for v in body])
    if tag == "?" and type(body) is str:
        return Opaque(body)
    raise ValueError(f"bad tagged value {tag[:20]!r}")


def builtin_name(exc):
    """The name of the nearest builtin class of an exception (a program's own classes are not carried)."""
    for cls in type.__dict__["__mro__"].__get__(type(exc)):
        if getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return "Exception"


def value_line(value):
    """The ``v`` line of a returned value (plain integers, the common case, without the JSON encoder)."""
    if type(value) is int and -_RAW_INT < value < _RAW_INT:
        return f"v {value}"
    try:
        return "v " + json.dumps(encode_value(value))
    except (ValueError, TypeError, RecursionError) as e:
        return "v " + json.dumps(["?", f"unencodable value ({e})"[:200]])


def exception_line(exc):
    try:
        msg = str(exc)[:500]
    except BaseException:
        msg = ""
    return json.dumps([builtin_name(exc), msg])
