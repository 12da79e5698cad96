"""Recipe text read as hostile (``bonforge.config_model``): every bad file is one ``ConfigError`` naming the
file, line and column, raised before anything is built from the text, and cheaply; the name grammar; error
messages never echo a huge value whole."""

from __future__ import annotations

import time

import pytest

from bonforge.config_model import MAX_DEPTH, check_name, load_yaml, parse_yaml
from bonforge.errors import ConfigError, shown


def refused(text: str | bytes, tmp_path, match: str) -> str:
    path = tmp_path / "r.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    started = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        load_yaml(path)
    assert time.perf_counter() - started < 10  # refused cheaply, not after expanding or recursing
    message = str(err.value)
    assert message.startswith(f"{path}: ") and "\n" not in message and len(message) < 400, message
    assert __import__("re").search(match, message), message
    return message


def laughs(levels: int, fan: int = 10) -> str:
    """The billion laughs: each anchor a list of ``fan`` aliases of the one before."""
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fan)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text, match", [
    ("name: x\nseed: 1\nseed: 2\n", r"line 3, column 1: key 'seed' given twice \(first on line 2\)"),
    ("a:\n  b: 1\n  c: 2\n  b: 3\n", r"line 4, column 3: key 'b' given twice"),
    ("a: {x: 1, x: 2}\n", r"line 1, column 11: key 'x' given twice"),
    ("yes: 1\ntrue: 2\n", r"line 2, column 1: key True given twice"),  # one key in YAML 1.1
    ("name: [x\nseed: 1\n", r"line 2, column 5: expected ',' or '\]'"),
    ("a: b: c\n", r"line 1, column 5: mapping values are not allowed here"),
    ("a:\n\t- 1\n", r"line 2, column 1: found character '\\t' that cannot start any token"),
    ("a: 1\x00\n", r"line 1, column 5: character #x0000 is not allowed in YAML"),
    ("a: *nothing\n", r"line 1, column 4: found undefined alias 'nothing'"),
    ("a: *" + "n" * 100_000 + "\n", r"found undefined alias 'nnnn.*\.\.\.$"),  # cut, not 100K characters
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", rf"line 1, column {MAX_DEPTH + 3}: nested more than {MAX_DEPTH} levels"),
    ("a: " + "{b: " * 5000 + "1" + "}" * 5000 + "\n", "nested more than 64 levels deep"),
    ("".join(" " * i + "k:\n" for i in range(200)), r"line 64, column 64: nested more than 64 levels deep"),
    (laughs(9), r"line 5, column 5: its aliases expand this to more than 100,000 nodes"),
    (laughs(30, fan=2), r"line 15, column 6: its aliases expand this to more than 100,000 nodes"),
    ("a: &a " + "[" * 60 + "]" * 60 + "\n" + "".join(f"b{i}: &b{i} [[[*{'a' if i == 0 else f'b{i - 1}'}]]]\n"
                                                     for i in range(4)),
     r"line 3, column 10: its aliases expand this deeper than 64 levels"),
    ("a: &a [1, *a]\n", r"line 1, column 4: an alias refers to the node that holds it"),
    ("seed: " + "9" * 5000 + "\n", r"line 1, column 7: integer '9999.*\(5,000 characters\) does not fit in 64 bits"),
    ("seed: 9223372036854775808\n", "integer '9223372036854775808' does not fit in 64 bits"),
    ("seed: -0x8000000000000001\n", "does not fit in 64 bits"),
    (b"name: x\nseed: \xff\n", r"line 2: byte 0xff is not UTF-8 text"),
    (b"\xfe\xffname: x\n", r"line 1: byte 0xfe is not UTF-8 text"),
], ids=lambda v: None if isinstance(v, str) and len(v) < 40 and v.isprintable() else "long")  # fmt: skip
def test_hostile_recipe_text_is_one_line_naming_the_place(tmp_path, text, match):
    refused(text, tmp_path, match)


def test_what_recipes_do_write_is_read_as_before(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("base: &base {n: 4, temperature: 0.6}\nteachers:\n  - <<: *base\n    n: 8\n    name: a\n"
                    "  - <<: *base\n    name: b\nseed: 9223372036854775807\nlow: -9223372036854775808\n"
                    "deep: " + "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2) + "\n")
    data = load_yaml(path)
    assert data["teachers"] == [{"n": 8, "temperature": 0.6, "name": "a"}, {"n": 4, "temperature": 0.6, "name": "b"}]
    assert data["seed"] == (1 << 63) - 1 and data["low"] == -(1 << 63)
    path.write_text("\ufeffname: x\n" + laughs(4))  # a BOM, and 10^3 aliased items: fine
    assert load_yaml(path)["name"] == "x"
    assert parse_yaml("- 1\n- 2\n", "s") == [1, 2]


def test_an_unreadable_file_is_one_line(tmp_path):
    (tmp_path / "r.yaml").mkdir()
    with pytest.raises(ConfigError, match=r"r\.yaml: cannot be read \(Is a directory\)"):
        load_yaml(tmp_path / "r.yaml")


@pytest.mark.parametrize("name", ["a", "GSM8K", "gsm8k-genselect.v2", "x_1", "9", "a" * 100, "a.."])
def test_names_that_are_paths_of_their_own(name):
    assert check_name(name, "a dataset name") == name


@pytest.mark.parametrize("name", [".", "..", "", ".hidden", "-rf", "_x", "a" * 101, "a/b", "a\\b", "../x",
                                  "x\x00", "dé", "ｆｕｌｌ", "a b", "a\n", "x\u202e", "con:x", 7, None])
def test_names_that_could_leave_their_folder_are_refused(name):
    with pytest.raises(ConfigError, match=r"^a dataset name must be 1 to 100 letters, digits"):
        check_name(name, "a dataset name")


def test_error_messages_quote_a_huge_value_cut():
    assert shown("ok") == "'ok'"
    huge = shown("x" * 2_000_000)
    assert len(huge) < 120 and huge.endswith("... (2,000,000 characters)")
    assert shown(10**5000) == "an integer of 16,610 bits"  # repr would raise past 4,300 digits
    assert shown(list(range(100_000))).endswith("characters as text)")


def test_a_number_with_an_exponent_and_no_dot_is_a_number():
    """PyYAML reads ``1e2`` and ``1.5e3`` as strings (a recipe's ``budget: 1e2`` was refused as not a number);
    they are read as YAML 1.2 and JSON read them. Quoted, it stays a string; what PyYAML read as numbers reads the
    same."""
    data = parse_yaml("budget: 1e2\nsmall: -2E-3\nbig: +5e+6\nquoted: '1e2'\ndotted: 1.5e3\nword: 1e2x\nint: 12\n"
                      "point: .5e1\nplain: 0.25\n", "s")
    assert data == {"budget": 100.0, "small": -0.002, "big": 5e6, "quoted": "1e2", "dotted": 1500.0, "word": "1e2x",
                    "int": 12, "point": 5.0, "plain": 0.25}
    assert isinstance(data["budget"], float) and isinstance(data["int"], int)
