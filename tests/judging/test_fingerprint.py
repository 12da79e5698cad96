"""The judge's fingerprint (``bonforge.judging.fingerprint``): code changes count, comments, docstrings and
formatting do not; it does not depend on where the package lies; each domain has its own; the verifier
libraries' versions and the code backend count; it enters the verdicts' stage key and row identity."""

from __future__ import annotations

import io
import os
import shutil
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from bonforge.config import MathVerifyConfig
from bonforge.judging import fingerprint as fp
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.stage import Ref
from bonforge.stages import verify

SOURCE = textwrap.dedent('''\
    """A module docstring."""
    import re


    def judge(text, gold):
        """Its docstring."""
        # a comment
        ok = text.strip() == gold
        return ("correct" if ok else "wrong_answer"), None
    ''')


def _write(tmp_path: Path, text: str, name: str = "m.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_comments_docstrings_and_formatting_do_not_count(tmp_path):
    base = fp.normalised(_write(tmp_path, SOURCE))
    restyled = SOURCE.replace('"""A module docstring."""', '"""Another docstring,\n\nlonger."""\n# new comment') \
        .replace('"""Its docstring."""', "'''Rewritten.'''") \
        .replace("# a comment", "# another comment, and a blank line below\n") \
        .replace('return ("correct" if ok else "wrong_answer"), None',
                 "return (\n        'correct' if ok\n        else 'wrong_answer',\n        None,\n    )")
    assert restyled != SOURCE
    assert fp.normalised(_write(tmp_path, restyled)) == base


def test_a_changed_line_of_code_counts(tmp_path):
    base = fp.normalised(_write(tmp_path, SOURCE))
    for changed in (SOURCE.replace("text.strip()", "text.lower().strip()"),
                    SOURCE.replace('"correct" if ok', '"wrong_answer" if ok'),
                    SOURCE.replace("import re", "import re\nLIMIT = 3"),
                    SOURCE.replace('"""Its docstring."""', '"""Its docstring."""\n    text = text[:10]')):
        assert fp.normalised(_write(tmp_path, changed)) != base, changed


def test_a_string_that_is_not_a_docstring_counts(tmp_path):
    source = "def f():\n    x = 1\n    'not a docstring'\n    return x\n"
    assert fp.normalised(_write(tmp_path, source)) != fp.normalised(_write(tmp_path, source.replace("not a", "a")))


def test_other_files_count_without_comments_and_blank_lines(tmp_path):
    docker = "FROM debian:bookworm-slim\nRUN apt-get install -y python3\n"
    base = fp.normalised(_write(tmp_path, docker, "Dockerfile"))
    assert fp.normalised(_write(tmp_path, "# why\n" + docker.replace("\n", "\n\n  "), "Dockerfile")) == base
    assert fp.normalised(_write(tmp_path, docker.replace("python3", "python3 gcc"), "Dockerfile")) != base


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "elsewhere" / "bonforge"
    shutil.copytree(fp.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_the_same_sources_elsewhere_give_the_same_parts(tmp_path):
    copy = _copy(tmp_path)
    for domain in ("math", "code"):
        assert fp.parts(domain, package=copy) == fp.parts(domain)


def test_each_domain_covers_its_own_judge(tmp_path):
    copy = _copy(tmp_path)
    math_before, code_before = fp.parts("math", package=copy), fp.parts("code", package=copy)
    assert {"source:judging/math.py", "source:judging/math_rules.py", "source:judging/extract.py",
            "library:math-verify", "library:latex2sympy2_extended",
            "library:sympy"} <= set(math_before)
    assert {"source:judging/code.py", "source:judging/compare.py", "source:judging/extract.py",
            "source:judging/spec.py", "source:sandbox/runner.py", "source:sandbox/pool.py",
            "source:sandbox/check_host.py", "source:sandbox/image.py", "source:sandbox/Dockerfile"} <= set(code_before)
    (copy / "sandbox" / "languages").mkdir()
    (copy / "sandbox" / "languages" / "cpp.py").write_text("FLAGS = ['-O2']\n")  # a new file counts by itself
    (copy / "judging" / "compare.py").write_text((copy / "judging" / "compare.py").read_text() + "\nX = 1\n")
    code_after = fp.parts("code", package=copy)
    assert "source:sandbox/languages/cpp.py" in code_after
    assert code_after["source:judging/compare.py"] != code_before["source:judging/compare.py"]
    assert fp.parts("math", package=copy) == math_before  # maths is not judged again for a code change


def _toolchains(monkeypatch, gxx: str = "g++ (Debian 12.2.0-14) 12.2.0") -> None:
    """The image's toolchains without asking an engine (tests that are not about them)."""
    monkeypatch.setattr(fp, "image_toolchains", lambda tag, build=True: {"toolchain:g++": gxx})
    fp.fingerprint.cache_clear()


def test_library_versions_and_the_backend_count(monkeypatch):
    _toolchains(monkeypatch)
    math_fp, docker_fp, process_fp = (fp.fingerprint("math"), fp.fingerprint("code", "docker"),
                                      fp.fingerprint("code", "process"))
    assert len({math_fp, docker_fp, process_fp}) == 3
    assert fp.fingerprint("code") == docker_fp  # docker is the default backend
    real = fp.metadata.version
    monkeypatch.setattr(fp.metadata, "version", lambda name: "9.9.9" if name == "sympy" else real(name))
    fp.fingerprint.cache_clear()
    try:
        assert fp.fingerprint("math") != math_fp
        assert fp.fingerprint("code", "docker") == docker_fp
    finally:
        monkeypatch.undo()
        fp.fingerprint.cache_clear()
    assert fp.fingerprint("math") == math_fp


def test_the_host_python_counts_only_for_the_process_backend(monkeypatch):
    _toolchains(monkeypatch)
    assert "python" in fp.parts("code", "process") and "python" not in fp.parts("code", "docker")


def test_computed_once_per_process(monkeypatch):
    fp.fingerprint("math")
    monkeypatch.setattr(fp, "parts", lambda *a, **k: (_ for _ in ()).throw(AssertionError("computed again")))
    fp.fingerprint("math")


RECIPE = {"name": "r", "problems": {"name": "t", "source": {"path": "x"}}, "teachers": [
    {"name": "t", "engine": "pool", "source": {"path": "x"}, "samples": "s"}], "export": {"name": "d"}}


def _key_and_ids(monkeypatch, judge: str, cfg) -> tuple[str, bytes]:
    from bonforge.config import Recipe

    monkeypatch.setattr(verify, "fingerprint", lambda domain, backend=None, *_: f"{judge}/{domain}/{backend}")
    code = isinstance(cfg, CodeVerifyConfig)
    recipe = Recipe.model_validate(RECIPE)
    recipe = recipe.model_copy(update={"verify": recipe.verify.model_copy(update={"code" if code else "math": cfg})})
    node = verify.node(recipe, Ref("problems", "p"), Ref("candidates", "c"), {"code" if code else "math"})
    problems = pa.table({"problem_id": ["p1"], "domain": ["code" if code else "math"], "question": ["q"],
                         "answer": ["1"], "tests": ['{"kind": "stdio", "tests": []}']})
    cands = pa.table({"candidate_id": ["c1"], "problem_id": ["p1"], "teacher": ["t"], "text": ["x"]})
    ids = node.stage.rows.ids(cands, {"problems": problems}, node.params)
    return node.key, ids.column("row_id")[0].as_py()


def test_the_fingerprint_enters_the_stage_key_and_the_row_identity(monkeypatch):
    for cfg in (MathVerifyConfig(), CodeVerifyConfig(pool_size=1)):
        key, row = _key_and_ids(monkeypatch, "a", cfg)
        assert _key_and_ids(monkeypatch, "a", cfg) == (key, row)
        other_key, other_row = _key_and_ids(monkeypatch, "b", cfg)
        assert other_key != key and other_row != row


def test_the_backend_enters_a_code_verdicts_key_and_identity(monkeypatch):
    docker = _key_and_ids(monkeypatch, "a", CodeVerifyConfig(pool_size=1, backend="docker"))
    process = _key_and_ids(monkeypatch, "a", CodeVerifyConfig(pool_size=1, backend="process"))
    assert docker[0] != process[0] and docker[1] != process[1]
    # other execution-only settings still change nothing
    assert _key_and_ids(monkeypatch, "a", CodeVerifyConfig(pool_size=7, backend="docker", retries=5)) == docker


def test_the_toolchains_count(monkeypatch, tmp_path):
    """The compilers that build and run programs are in the code judge's fingerprint: the image's (a rebuild
    under the same tag with a newer g++ judges again) and, for backend process, the host's."""
    _toolchains(monkeypatch)
    docker = fp.fingerprint("code", "docker")
    _toolchains(monkeypatch, "g++ (Debian 12.2.0-14+deb12u1) 12.2.0")
    assert fp.fingerprint("code", "docker") != docker
    assert fp.fingerprint("math") == fp.fingerprint("math")  # maths has none
    host = fp.parts("code", "process")
    assert {"toolchain:g++", "toolchain:javac", "toolchain:java", "toolchain:pypy3"} <= set(host)
    fake = tmp_path / "g++"  # another g++ first on the host's PATH
    fake.write_text("#!/bin/sh\necho 'g++ (Custom 99.1) 99.1.0'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    assert fp.parts("code", "process")["toolchain:g++"] == "g++ (Custom 99.1) 99.1.0"
    assert {k: v for k, v in fp.parts("code", "process").items() if k != "toolchain:g++"} == {
        k: v for k, v in host.items() if k != "toolchain:g++"}
    fp.fingerprint.cache_clear()


def test_a_missing_toolchain_reads_absent(monkeypatch, tmp_path):
    (tmp_path / "head").symlink_to(shutil.which("head"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no compiler at all
    assert set(fp.host_toolchains().values()) == {"absent"}


@pytest.mark.docker
def test_an_image_rebuilt_with_another_compiler_judges_again(sandbox_image):
    """The same image under a new tag judges alike; an image built from it with another g++ (a rebuild with
    newer compilers) has other toolchains, so another fingerprint."""
    from bonforge.sandbox import image

    retag, rebuilt = f"bonforge-test-retag:{os.getpid()}", f"bonforge-test-rebuilt:{os.getpid()}"
    script = "#!/bin/sh\\necho \"g++ (Rebuilt 13.1) 13.1.0\"\\n"
    dockerfile = f"FROM {sandbox_image}\nRUN printf '{script}' > /g && chmod +x /g && mv -f /g /usr/bin/g++\n"
    image.client().images.get(sandbox_image).tag(retag)
    try:
        image.client().images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=rebuilt, rm=True, network_mode="none")
        first = fp.image_toolchains(sandbox_image, build=False)
        assert first["toolchain:g++"].startswith("g++ (Debian")
        assert {"toolchain:javac", "toolchain:java", "toolchain:pypy3", "toolchain:python3"} <= set(first)
        assert "absent" not in first.values()
        assert fp.image_toolchains(retag, build=False) == first
        other = fp.image_toolchains(rebuilt, build=False)
        assert other["toolchain:g++"] == "g++ (Rebuilt 13.1) 13.1.0"
        assert {k: v for k, v in other.items() if k != "toolchain:g++"} == {
            k: v for k, v in first.items() if k != "toolchain:g++"}
        fp.fingerprint.cache_clear()
        assert fp.fingerprint("code", "docker", retag, False) == fp.fingerprint("code", "docker", sandbox_image, False)
        assert fp.fingerprint("code", "docker", rebuilt, False) != fp.fingerprint("code", "docker", retag, False)
    finally:
        fp.fingerprint.cache_clear()
        for tag in (rebuilt, retag):
            try:
                image.client().images.remove(tag)
            except Exception:  # noqa: BLE001  (never built)
                pass
