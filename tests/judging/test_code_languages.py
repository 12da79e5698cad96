"""Code verification's language and limit parts without a sandbox: the language from the record, the fence or
the recipe; native requests (built once, time scaled by language); a problem's memory limit; the spec's
checker and memory limit, and their errors."""

from __future__ import annotations

import json

import pytest

from bonforge.errors import DataError
from bonforge.judging.code_request import build_request, memory_mb, program_language
from bonforge.judging.extract import extract_code, extract_program
from bonforge.judging.spec import parse_spec
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.languages import java_names

STDIO = {"kind": "stdio", "tests": [{"input": "1\n", "output": "1\n"}]}


@pytest.mark.parametrize(
    "text,program,tag",
    [
        ("```cpp\nint main(){}\n```", "int main(){}\n", "cpp"),
        ("```C++\nint main(){}\n```", "int main(){}\n", "c++"),
        ("```python\nx = 1\n```\nthen\n```java\nclass A {}\n```\n", "class A {}\n", "java"),
        ("```java\nclass A {}\n```\n```rust\nfn main() {}\n```\n", "class A {}\n", "java"),  # rust: not ours
        ("```pypy3\nprint(1)\n```", "print(1)\n", "pypy3"),
        ("```\nprint(1)\n```", "print(1)\n", None),
        ("cut short:\n```cpp\nint main() {\n", "int main() {\n", "cpp"),
    ],
)
def test_the_fence_names_the_language(text, program, tag):
    assert extract_code(text, None, "stdio") == (program, tag)
    assert extract_program(text, None, "stdio") == program


def test_the_language_comes_from_the_record_then_the_fence_then_the_recipe():
    stdio, call = parse_spec(json.dumps(STDIO), "p"), parse_spec(
        json.dumps({"kind": "call", "fn_name": "f", "tests": [{"args": [1], "output": 1}]}), "q")
    cfg = CodeVerifyConfig()
    assert program_language("C++", "java", stdio, cfg) == ("cpp", "")
    assert program_language(None, "java", stdio, cfg) == ("java", "")
    assert program_language(None, None, stdio, cfg) == ("python", "")
    assert program_language(None, None, stdio, CodeVerifyConfig(default_language="c++")) == ("cpp", "")
    why = program_language("fortran", None, stdio, cfg)[1]
    assert why.startswith("the candidate names an unknown language 'fortran'")
    assert "cannot run call-style tests" in program_language(None, "cpp", call, cfg)[1]


def test_a_native_request_builds_once_under_its_own_limits_and_scales_time_by_language():
    spec = parse_spec(json.dumps(dict(STDIO, time_limit_s=2.0, memory_mb=256)), "p")
    cfg = CodeVerifyConfig(time_limit_s=5.0, memory_mb=1024, build_time_limit_s=20.0)
    java = build_request(spec, "public final class Solver { }", cfg, "c", language="java")
    assert java["files"] == [{"name": "Solver.java", "text": "public final class Solver { }"}]
    assert java["exec"][-1] == "Solver" and "-Xmx256m" in java["exec"] and java["address_limit"] is False
    assert java["build"]["time_limit"] == 20.0 and java["build"]["argv"][0] == "javac"
    assert java["time_limit"] == 4.0 and java["memory_mb"] == 256  # java's default multiplier: 2
    cpp = build_request(spec, "int main(){}", cfg, "c", language="cpp")
    assert cpp["exec"] == ["./main"] and cpp["build"]["argv"][-1] == "main.cpp" and cpp["time_limit"] == 2.0
    py = build_request(spec, "print(1)", cfg, "c")
    assert "exec" not in py and "build" not in py
    assert java_names("class Helper {}\npublic class Main2 {}") == ("Main2", "Main2")
    assert java_names("class X {}") == ("Main", "Main")


def test_a_problems_memory_limit_is_capped_by_the_recipes():
    cfg = CodeVerifyConfig(memory_mb=512)
    spec = parse_spec(json.dumps(STDIO), "p")
    assert memory_mb(spec, cfg) == 512
    assert memory_mb(parse_spec(json.dumps(dict(STDIO, memory_mb=64)), "p"), cfg) == 64
    assert memory_mb(parse_spec(json.dumps(dict(STDIO, memory_mb=4096)), "p"), cfg) == 512


@pytest.mark.parametrize(
    "doc,message",
    [
        (dict(STDIO, memory_mb="256 MB"), "'memory_mb' must be a finite positive number"),
        (dict(STDIO, memory_mb=-1), "'memory_mb' must be a finite positive number"),
        (dict(STDIO, checker="int main(){}"), "'checker' must be"),
        (dict(STDIO, checker={"source": "x", "files": {"../testlib.h": ""}}), "'checker' must be"),
        ({"kind": "call", "fn_name": "f", "tests": [{"args": [], "output": 1}], "checker": {"source": "x"}},
         "'checker' applies to stdio tests only"),
    ],
)
def test_bad_checker_or_memory_limit_is_the_problems_error(doc, message):
    with pytest.raises(DataError, match=message) as e:
        parse_spec(json.dumps(doc), "p1")
    assert "p1" in str(e.value)


def test_the_spec_keeps_its_checker_and_memory_limit():
    doc = dict(STDIO, memory_mb=64, checker={"source": "int main(){}", "files": {"testlib.h": "//"}})
    spec = parse_spec(json.dumps(doc), "p")
    assert parse_spec(spec.to_json(), "p") == spec and spec.memory_mb == 64.0
