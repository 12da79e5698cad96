"""Compiled checkers kept on disk: a later process finds a checker compiled without compiling it again, keyed
on the checker's content and the sandbox image's id; a short or corrupt file is rebuilt; a failed build and
the process backend's binaries stay in their process; a folder that cannot be written costs compiles only."""

from __future__ import annotations

import base64

import pytest

from bonforge.sandbox import checker_cache, testlib
from bonforge.sandbox.config import CodeVerifyConfig
from bonforge.sandbox.testlib import Checkers

ELF = b"\x7fELF" + bytes(range(256)) * 40  # stands for a compiled checker
OK = {"source": "int main() { return 0; }\n", "files": {"testlib.h": "// a header\n"}}
BROKEN = {"source": "int main( {\n"}


class Pool:
    """A pool that compiles by answering ``ELF`` (or a build error for ``BROKEN``) and counts the builds."""

    def __init__(self):
        self.builds = []

    def run(self, requests):
        assert all("build" in r for r in requests), "only builds are asked of this pool"
        self.builds += [r["files"][0]["text"] for r in requests]
        return [{"build_error": "expected ')'"} if r["files"][0]["text"] == BROKEN["source"]
                else {"artifact": base64.b64encode(ELF).decode()} for r in requests]  # fmt: skip


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache folder and image 'sha256:one'; ``fresh()`` forgets what this process compiled (as a new
    process would) and returns a new ``Checkers`` on a counting pool."""
    monkeypatch.setenv("BONFORGE_HOME", str(tmp_path))
    one = property(lambda self: self.cfg.backend == "docker" and "sha256:one" or None)
    monkeypatch.setattr(Checkers, "image", one, raising=False)  # (raising: these tests fail, not error, without it)
    monkeypatch.setattr(testlib, "_binaries", {})

    def new(backend: str = "docker") -> Checkers:
        testlib._binaries.clear()
        return Checkers(CodeVerifyConfig(backend=backend), pool=Pool())

    return new


def test_a_later_process_finds_the_compiled_checker_on_disk(fresh):
    first = fresh()
    assert first.compile([OK, OK]) == [base64.b64encode(ELF).decode()] * 2 and len(first._pool.builds) == 1
    assert [p.name for p in checker_cache.root().iterdir()] and checker_cache.root().stat().st_mode & 0o077 == 0
    later = fresh()
    assert later.compile([OK]) == first.compile([OK]) and later._pool.builds == []  # read from disk, not compiled


def test_the_key_holds_the_image_and_the_content(fresh, monkeypatch):
    fresh().compile([OK])
    other_header = dict(OK, files={"testlib.h": "// another header\n"})
    again = fresh()
    again.compile([other_header])
    assert again._pool.builds == [OK["source"]]  # same source, another header: compiled
    monkeypatch.setattr(Checkers, "image", property(lambda self: "sha256:two"))
    rebuilt = fresh()
    rebuilt.compile([OK])
    assert rebuilt._pool.builds == [OK["source"]]  # same checker, another image: compiled


def test_the_image_is_asked_of_the_engine_once_per_checkers(monkeypatch, tmp_path):
    from bonforge.sandbox import image

    monkeypatch.setenv("BONFORGE_HOME", str(tmp_path))
    monkeypatch.setattr(testlib, "_binaries", {})
    asked: list[str] = []
    monkeypatch.setattr(image, "ensure_image", lambda tag, build: tag)
    monkeypatch.setattr(image, "image_id", lambda tag: asked.append(tag) or "sha256:one")
    checkers = Checkers(CodeVerifyConfig(backend="docker"), pool=Pool())
    for _ in range(3):
        checkers.compile([OK])
    assert len(asked) == 1 and len(checkers._pool.builds) == 1


@pytest.mark.parametrize("damage", [lambda b: b[:-1], lambda b: b[:-5] + b"XXXXX", lambda b: b"", lambda b: b"\n"])
def test_a_short_or_corrupt_file_is_rebuilt(fresh, damage):
    fresh().compile([OK])
    (path,) = checker_cache.root().glob("*.bin")
    path.write_bytes(damage(path.read_bytes()))
    again = fresh()
    assert again.compile([OK]) == [base64.b64encode(ELF).decode()] and len(again._pool.builds) == 1
    assert checker_cache.load(path.stem, testlib.MAX_BINARY) == ELF  # and written again whole


def test_a_file_over_the_size_limit_is_ignored(fresh):
    checker_cache.store("k", ELF)
    assert checker_cache.load("k", len(ELF)) == ELF and checker_cache.load("k", len(ELF) - 1) is None


def test_failed_builds_and_the_process_backend_stay_in_their_process(fresh):
    assert fresh().compile([BROKEN])[0].startswith("!the problem's checker does not compile: expected ')'")
    fresh("process").compile([OK])
    assert not checker_cache.root().exists() or not any(checker_cache.root().iterdir())  # nothing kept on disk
    broken, host = fresh(), fresh("process")
    broken.compile([BROKEN])
    host.compile([OK])
    assert len(broken._pool.builds) == len(host._pool.builds) == 1  # compiled again in a new process


def test_a_folder_that_cannot_be_written_costs_compiles_only(fresh, tmp_path, monkeypatch, caplog):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("BONFORGE_HOME", str(tmp_path / "file"))  # its checker-cache cannot be made
    checkers = fresh()
    assert checkers.compile([OK]) == [base64.b64encode(ELF).decode()]
    assert "compiled checker not kept" in caplog.text
    again = fresh()
    again.compile([OK])
    assert len(again._pool.builds) == 1


@pytest.mark.docker
def test_a_binary_from_disk_runs_in_the_sandbox(docker_pool, monkeypatch, tmp_path):
    """Compiled in the real image, forgotten by the process, read back from disk: it runs, nothing rebuilt."""
    monkeypatch.setenv("BONFORGE_HOME", str(tmp_path))
    monkeypatch.setattr(testlib, "_binaries", {})
    equal = {"source": "#include <fstream>\n#include <string>\nint main(int, char** v) {\n  std::ifstream o(v[2]),"
             " a(v[3]); std::string x, y; o >> x; a >> y; return x == y ? 0 : 1;\n}\n"}  # fmt: skip
    cfg = docker_pool.cfg
    (built,) = Checkers(cfg, pool=docker_pool).compile([equal])
    assert not built.startswith("!"), built
    testlib._binaries.clear()
    asked = []
    run = docker_pool.run
    monkeypatch.setattr(docker_pool, "run", lambda requests: asked.extend(requests) or run(requests))
    later = Checkers(cfg, pool=docker_pool)
    assert later.compile([equal]) == [built] and asked == []
    (readings,) = later.check([(built, [("", "7\n", "7\n"), ("", "8\n", "7\n")])])
    assert [status for status, _ in readings] == ["passed", "wrong_answer"]
