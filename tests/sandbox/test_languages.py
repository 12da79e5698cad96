"""The sandbox's language settings, testlib's exit codes as verdicts, the typed wire and the image's key."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from bonforge.sandbox import image, wire
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.languages import LANGUAGES, language_of
from bonforge.sandbox.testlib import CRASHED, PROBLEM_ERROR, reading


def test_language_settings_are_checked_at_load():
    assert CodeVerifyConfig(time_multipliers={"C++": 3, "pypy3": 1.5}).time_multipliers == {"cpp": 3.0, "pypy": 1.5}
    with pytest.raises(ValidationError, match="unknown language 'rust'"):
        CodeVerifyConfig(time_multipliers={"rust": 1})
    with pytest.raises(ValidationError, match="factor must be in"):
        CodeVerifyConfig(time_multipliers={"java": 0})
    with pytest.raises(ValidationError, match="unknown language 'go'"):
        CodeVerifyConfig(default_language="go")
    assert CodeVerifyConfig().key_config() == CodeVerifyConfig(default_language="python").key_config()
    assert "time_multipliers" in CodeVerifyConfig(time_multipliers={"java": 3}).key_config()


@pytest.mark.parametrize(
    "result,status,words",
    [
        ({"status": "ok", "exit_code": 0}, "passed", ""),
        ({"status": "runtime_error", "exit_code": 1, "stderr": "wrong answer 1st words differ"}, "wrong_answer",
         "the checker says wrong answer: wrong answer 1st words differ"),
        ({"status": "runtime_error", "exit_code": 2, "stderr": "wrong output format"}, "wrong_answer",
         "presentation error"),
        ({"status": "runtime_error", "exit_code": 3, "stderr": "FAIL Judge can't find solution"}, PROBLEM_ERROR,
         "reported its own failure (exit 3): FAIL"),
        # a crash: the problem's error unless a control run on the jury's answer is accepted (judging.code)
        ({"status": "runtime_error", "exit_code": -6}, CRASHED, "failed (runtime_error, exit code -6)"),
        ({"status": "runtime_error", "exit_code": 127, "error": "cannot start ./checker"}, CRASHED,
         "cannot start"),
        ({"status": "timeout"}, CRASHED, "failed (timeout)"),
    ],
)
def test_testlib_exit_codes(result, status, words):
    got, note = reading(result)
    assert got == status and words in note


def test_the_wire_closes_the_status_set_and_checks_an_answers_shape():
    assert {s.value for s in wire.Status} == wire.STATUSES == {"ok", "runtime_error", "compile_error", "timeout",
                                                                "memory_limit", "output_limit", "unfinished"}
    request = wire.Request.read({"id": 7, "kind": "stdio", "tests": [{"input": ""}], "time_limit": 1.0,
                                 "wall_limit": 3.0, "memory_mb": 64, "output_limit": 10})  # fmt: skip
    good = {"id": 7, "clean": True, "results": [{"status": "ok", "cpu_s": 0.1, "wall_s": 0.2, "exit_code": 0}]}
    assert wire.Answer.of(good, request).results[0].exit_code == 0

    def problem(answer):
        with pytest.raises(wire.WireError) as e:
            wire.Answer.of(answer, request)
        return str(e.value)

    one = good["results"][0]
    assert problem(dict(good, results=[dict(one, exit_code="0")])).startswith("result 0 field 'exit_code'")
    assert problem(dict(good, results=[dict(good["results"][0], status="ac")])).startswith("result 0 field 'status'")
    assert problem(dict(good, artifact=5)).startswith("answer field 'artifact'")
    assert problem(dict(good, unfinished="yes")).startswith("answer field 'unfinished'")
    waited = dict(good["results"][0], wait_s=0.1)
    assert wire.Answer.of(dict(good, results=[waited]), request).results[0].wait_s == 0.1
    assert problem(dict(good, results=[dict(waited, wait_s="1")])).startswith("result 0 field 'wait_s'")
    built = dataclasses.replace(request, build=wire.Build(["cc"], 1.0, 3.0, 64, 3000, keep="x"))
    assert wire.max_answer_bytes(built) > wire.max_answer_bytes(request) + 4000


def test_the_images_tag_changes_with_its_package_list(monkeypatch):
    before = image.default_tag()
    assert image.BASE_IMAGE.startswith("bonforge-sandbox-base:bookworm-")
    monkeypatch.setattr(image, "BASE_IMAGE", "bonforge-sandbox-base:bookworm-other")
    assert image.default_tag() != before
    assert set(LANGUAGES) == {"python", "cpp", "java", "pypy"} and language_of("GNU++17").name == "cpp"


@pytest.mark.parametrize(
    "program,names",
    [
        # controls: the usual shapes
        ("public class Main { public static void main(String[] a) {} }", ("Main", "Main")),
        ("import java.util.*;\nclass Helper {}\npublic final class Solver {\n"
         "  public static void main(String... a) {}\n}", ("Solver", "Solver")),
        # a class named in a comment, a string, a text block or a character literal is not the program's
        ("// public class Wrong\n/* public class Worse { */\npublic class Main {\n"
         "  static String s = \"public class Str {\", t = \"\"\"\n  public class Block {\n  \"\"\";\n"
         "  static char c = '{';\n  public static void main(String[] a) {}\n}", ("Main", "Main")),
        # the main class need not be public; another public class names the file
        ("class Solution {\n  public static void main(String[] a) {}\n}", ("Solution", "Solution")),
        ("class A { public static void main(String[] a) {} }\npublic class B {}", ("B", "A")),
        # the public class's main first; a nested class by its binary name; a package's classes by their full name
        ("class A { public static void main(String[] a) {} }\n"
         "public class B { public static void main(String[] a) {} }", ("B", "B")),
        ("package foo.bar;\nclass A { static class B { public static void main(String[] a) {} } }",
         ("A", "foo.bar.A$B")),
        # an instance or private main is not the entry point; nothing declares one: the public class, else Main
        ("class A { void main(String[] a) {} }\npublic class B { private static void main(String[] a) {} }",
         ("B", "B")),
        ("class X {}", ("Main", "Main")),
        # attacks: Unicode escapes are read as javac reads them (an escaped backslash is no escape); a nested
        # class's main does not stand before the public class's own; an interface's main is public unsaid
        ("public \\u0063lass Sol { \\u0070ublic static void main(String[] a) {} }", ("Sol", "Sol")),
        ("class A {}\n// \\u000a public class B { public static void main(String[] a) {} }", ("B", "B")),
        ('public class Sol { String s = "\\\\u0022; class Fake {"; public static void main(String[] a) {} }',
         ("Sol", "Sol")),
        ("public class Sol { static class In { public static void main(String[] a) {} }\n"
         "  public static void main(String[] a) {} }", ("Sol", "Sol")),
        ("interface Sol { static void main(String[] a) {} }", ("Sol", "Sol")),
        ("class Sol { static void main(String[] a) {} }", ("Main", "Main")),  # control: package-private main
    ],
)
def test_java_names_come_from_the_code_not_its_comments_or_strings(program, names):
    from bonforge.sandbox.languages import java_names

    assert java_names(program) == names


def test_java_names_take_linear_time_on_hostile_text():
    import time

    from bonforge.sandbox.languages import SCAN_CHARS, java_names

    n = SCAN_CHARS
    for text in ('"' * n, "/*" * (n // 2), '"""\\' * (n // 4), "class A{" * (n // 8), "public " * (n // 7),
                 "\\" * n, "\\" + "u" * n, "\\u00" * (n // 4)):
        start = time.process_time()
        java_names(text)
        assert time.process_time() - start < 3.0
