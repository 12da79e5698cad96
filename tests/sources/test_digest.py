"""Sources enter stage keys by their content: a digest cached by stat (an unchanged file is not read again,
an edited one is), the same bytes under any spelling of the path give the same key, and the stages that
read files (problems, pool teachers, decontamination benchmarks) key on it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bonforge.sources import data
from bonforge.config import Recipe
from bonforge.errors import DataError
from bonforge.sources import digest
from bonforge.stages import decontaminate, load, load_pool
from bonforge.stage import Ref

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BONFORGE_DIGESTS", str(tmp_path / "cache" / "digests.sqlite"))
    monkeypatch.setattr(digest, "RACY_S", 0.0)  # the files here are seconds old; test_a_fresh_file_... sets it


def test_a_file_changed_in_the_last_seconds_is_read_again_not_cached(tmp_path, monkeypatch, reads):
    monkeypatch.setattr(digest, "RACY_S", 2.0)
    f = tmp_path / "p"
    f.write_bytes(b"1")
    digest.content_key(f)
    digest.content_key(f)
    assert len(reads) == 2  # a same-size rewrite in the same clock tick would have kept its stat
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns - 10**10))
    monkeypatch.setattr(digest.time, "time_ns", lambda: max(st.st_mtime_ns, st.st_ctime_ns) + 3 * 10**9)
    digest.content_key(f)
    digest.content_key(f)
    assert len(reads) == 3  # settled: cached


@pytest.fixture
def reads(monkeypatch):
    """The files the digest code read in full."""
    seen: list[str] = []
    real = digest._read_digest

    def counting(path: str) -> str:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(digest, "_read_digest", counting)
    return seen


def write_rows(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_file_is_its_sha256_read_once_and_again_when_edited_in_place(tmp_path, reads):
    f = tmp_path / "p.jsonl"
    f.write_bytes(b"abc\n")
    assert digest.content_key(f) == {"sha256": hashlib.sha256(b"abc\n").hexdigest()}
    assert digest.content_key(f) == digest.content_key(f)
    assert len(reads) == 1  # unchanged: a stat and a look-up
    st = f.stat()
    with open(f, "r+b") as h:  # the same size, the mtime put back: the inode's ctime still tells
        h.write(b"abd")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert digest.content_key(f) == {"sha256": hashlib.sha256(b"abd\n").hexdigest()}
    assert len(reads) == 2
    f.write_bytes(b"abd\nmore\n")  # appended
    assert digest.content_key(f)["sha256"] == hashlib.sha256(b"abd\nmore\n").hexdigest()
    other = tmp_path / "q.jsonl"
    other.write_bytes(b"abd\nmore\n")
    os.replace(other, f)  # replaced by another file with the same bytes: another inode, read, same digest
    assert digest.content_key(f)["sha256"] == hashlib.sha256(b"abd\nmore\n").hexdigest() and len(reads) == 4


def test_a_folder_is_its_files_paths_and_contents(tmp_path, reads):
    root = tmp_path / "ds"
    (root / "data").mkdir(parents=True)
    (root / "data" / "a.parquet").write_bytes(b"1")
    (root / "b.json").write_bytes(b"2")
    first = digest.content_key(root)
    assert set(first) == {"tree_sha256"}
    moved = tmp_path / "elsewhere"
    root.rename(moved)
    assert digest.content_key(moved) == first  # the place does not count
    (moved / "c").write_bytes(b"")
    assert digest.content_key(moved) != first  # a new file does
    (moved / "c").unlink()
    (moved / "b.json").rename(moved / "d.json")
    assert digest.content_key(moved) != first  # and a renamed one


def test_an_unusable_cache_is_skipped(tmp_path, monkeypatch, reads):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("BONFORGE_DIGESTS", str(blocker / "sub" / "digests.sqlite"))  # under a file: cannot exist
    f = tmp_path / "p"
    f.write_bytes(b"x")
    assert digest.content_key(f) == digest.content_key(f) == {"sha256": hashlib.sha256(b"x").hexdigest()}
    assert len(reads) == 2  # no cache, no failure: read each time


def test_concurrent_writers_share_one_cache(tmp_path):
    files = []
    for i in range(40):
        f = tmp_path / f"f{i}"
        f.write_bytes(os.urandom(1000 + i))
        files.append(f)
    code = ("import sys, json; from bonforge.sources import digest; digest.RACY_S = 0; "
            "print(json.dumps([digest.content_key(p)['sha256'] for p in sys.argv[1:]]))")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", code, *map(str, files[::step])], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for step in (1, 1, 1, 2)]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    want = [hashlib.sha256(f.read_bytes()).hexdigest() for f in files]
    assert [json.loads(o[0]) for o in outs] == [want, want, want, want[::2]]
    assert digest._Cache(digest.cache_path()).con.execute("SELECT count(*) FROM digests").fetchone() == (40,)


def recipe(path: str, **extra) -> Recipe:
    return Recipe.model_validate({
        "name": "r", "problems": {"name": "toy", "source": {"path": path}},
        "teachers": [{"name": "pool", "engine": "pool", "source": {"path": path}, "match": "order"}],
        "export": {"name": "d"}, **extra})  # fmt: skip


def test_the_same_bytes_under_any_path_key_alike_and_an_edit_in_place_does_not(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BONFORGE_DATA", raising=False)
    write_rows(tmp_path / "problems.jsonl", [{"question": "1+1?", "answer": "2", "samples": ["2"]}])
    spellings = ["problems.jsonl", "./problems.jsonl", str(tmp_path / "problems.jsonl"), "sub/../problems.jsonl"]
    (tmp_path / "sub").mkdir()
    pref = Ref("problems", "k")
    bench = {"decontaminate": {"benchmarks": [{"name": "b", "source": {"path": "problems.jsonl"},
                                               "field": "question", "id": None}]}}  # fmt: skip

    def keys(path: str) -> tuple[str, str, str]:
        r = recipe(path, **bench)
        return (load.node(r, tmp_path).key, load_pool.node(tmp_path, pref, r.teachers[0]).key,
                decontaminate.node(r, tmp_path).key)

    first = keys(spellings[0])
    assert all(keys(s) == first for s in spellings[1:])
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes((tmp_path / "problems.jsonl").read_bytes())
    assert keys("copy.jsonl") == first  # another name, the same bytes

    with open(tmp_path / "problems.jsonl", "a") as f:  # the same file, one more row
        f.write(json.dumps({"question": "2+2?", "answer": "4", "samples": ["4"]}) + "\n")
    grown = keys("problems.jsonl")
    assert all(a != b for a, b in zip(grown, first))


def test_a_pool_or_benchmark_list_edited_in_place_changes_its_stage_only(tmp_path, monkeypatch):
    monkeypatch.delenv("BONFORGE_DATA", raising=False)
    write_rows(tmp_path / "problems.jsonl", [{"question": "1+1?", "answer": "2"}])
    write_rows(tmp_path / "pool.jsonl", [{"samples": ["2"]}])
    write_rows(tmp_path / "bench.jsonl", [{"question": "3+3?"}])
    r = Recipe.model_validate({
        "name": "r", "problems": {"name": "toy", "source": {"path": "problems.jsonl"}},
        "teachers": [{"name": "pool", "engine": "pool", "source": {"path": "pool.jsonl"}, "match": "order"}],
        "decontaminate": {"benchmarks": [{"name": "b", "source": {"path": "bench.jsonl"}, "field": "question",
                                          "id": None}]},
        "export": {"name": "d"}})  # fmt: skip

    def keys() -> tuple[str, str, str]:
        return (load.node(r, tmp_path).key, load_pool.node(tmp_path, Ref("problems", "k"), r.teachers[0]).key,
                decontaminate.node(r, tmp_path).key)

    before = keys()
    write_rows(tmp_path / "pool.jsonl", [{"samples": ["3"]}])  # the same size, the same file
    pooled = keys()
    assert pooled[0] == before[0] and pooled[2] == before[2] and pooled[1] != before[1]
    with open(tmp_path / "bench.jsonl", "a") as f:
        f.write(json.dumps({"question": "4+4?"}) + "\n")
    benched = keys()
    assert benched[:2] == pooled[:2] and benched[2] != pooled[2]


def test_a_stated_sha256_is_the_key_and_the_local_bytes_have_the_same(tmp_path, monkeypatch):
    monkeypatch.delenv("BONFORGE_DATA", raising=False)
    write_rows(tmp_path / "p.jsonl", [{"question": "1+1?", "answer": "2"}])
    sha = hashlib.sha256((tmp_path / "p.jsonl").read_bytes()).hexdigest()
    by_url = recipe("never/downloaded.jsonl").model_copy(deep=True)
    by_url = by_url.model_copy(update={"problems": by_url.problems.model_copy(update={"source": data.DataSource(
        path="never/downloaded.jsonl", url="https://example.invalid/p.jsonl", sha256=sha)})})
    assert load.node(by_url, tmp_path).key == load.node(recipe("p.jsonl"), tmp_path).key  # nothing downloaded


def test_a_source_edited_while_the_build_runs_is_an_error(tmp_path, monkeypatch):
    monkeypatch.delenv("BONFORGE_DATA", raising=False)
    write_rows(tmp_path / "p.jsonl", [{"question": "1+1?", "answer": "2"}])
    node = load.node(recipe("p.jsonl"), tmp_path)
    write_rows(tmp_path / "p.jsonl", [{"question": "1+1?", "answer": "3"}])
    with pytest.raises(DataError, match="changed while the build was running"):
        node.stage.compute(None, **node.params.compute_args())


def test_a_local_tokenizer_keys_by_its_files_not_its_path(tmp_path, monkeypatch):
    from bonforge.config import GenSelectConfig
    from bonforge.selection.prompts import key_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text('{"v": 1}')
    (tmp_path / "tok" / "model.safetensors").write_bytes(b"weights")
    a = key_config(GenSelectConfig(tokenizer="tok"), 0)
    assert key_config(GenSelectConfig(tokenizer=str(tmp_path / "tok")), 0) == a
    (tmp_path / "tok" / "model.safetensors").write_bytes(b"other weights")  # not the tokenizer
    assert key_config(GenSelectConfig(tokenizer="tok"), 0) == a
    (tmp_path / "tok" / "tokenizer.json").write_text('{"v": 2}')
    assert key_config(GenSelectConfig(tokenizer="tok"), 0) != a


def test_a_shard_behind_a_linked_folder_is_in_the_key(tmp_path):
    """A folder linked into the source is read by the loaders (an explicit glob follows links): a shard
    rewritten behind the link is a new input. Control: a file beside the linked folder, not linked, is not."""
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "train-00000-of-00001.parquet").write_bytes(b"v1")
    (tmp_path / "unlinked.parquet").write_bytes(b"x")
    root = tmp_path / "ds"
    root.mkdir()
    (root / "README.md").write_text("a table")
    (root / "data").symlink_to(shards, target_is_directory=True)
    first = digest.content_key(root)
    (tmp_path / "unlinked.parquet").write_bytes(b"y")
    assert digest.content_key(root) == first
    (shards / "train-00000-of-00001.parquet").write_bytes(b"v2")
    assert digest.content_key(root) != first
    copy = tmp_path / "copy"  # the same tree with the folder in place: the same key (a link is not content)
    (copy / "data").mkdir(parents=True)
    (copy / "README.md").write_text("a table")
    (copy / "data" / "train-00000-of-00001.parquet").write_bytes(b"v2")
    assert digest.content_key(copy) == digest.content_key(root)


def test_a_link_loop_is_keyed_as_the_link_and_walked_once(tmp_path, reads):
    root = tmp_path / "ds"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x.jsonl").write_bytes(b"1")
    (root / "a" / "back").symlink_to(root, target_is_directory=True)  # a loop through the root
    (root / "a" / "self").symlink_to(".", target_is_directory=True)  # and one through its own folder
    (root / "knot").symlink_to("knot")  # a link to itself: neither file nor folder
    first = digest.content_key(root)
    assert len(reads) == 1  # x.jsonl once, never again through the loops
    (root / "a" / "self").unlink()
    assert digest.content_key(root) != first  # the link is part of the tree
    (root / "a" / "self").symlink_to(".", target_is_directory=True)
    assert digest.content_key(root) == first


def test_a_tree_past_the_file_cap_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(digest, "MAX_TREE_FILES", 3)
    for i in range(5):
        (tmp_path / f"f{i}").write_bytes(b"")
    with pytest.raises(DataError, match="more than 3 files in this folder"):
        digest.content_key(tmp_path)


def _package(folder: Path, include: str = "testlib.h") -> None:
    (folder / "tests").mkdir(parents=True)
    (folder / "info.toml").write_text("timelimit = 2.0\n")
    (folder / "tests" / "1.in").write_text("1 2\n")
    (folder / "tests" / "1.out").write_text("3\n")
    (folder / "checker.cpp").write_text(f'#include "{include}"\nint main() {{ return 0; }}\n')


def test_one_packages_common_headers_are_in_its_key(tmp_path, monkeypatch):
    """A single package's checker includes headers from the ``common`` folder beside it: editing one is a new
    input to the problems stage. Controls: an unrelated sibling package leaves the key alone, and in a folder of
    packages ``common`` is inside the source already."""
    monkeypatch.delenv("BONFORGE_DATA", raising=False)
    _package(tmp_path / "lc" / "aplusb")
    _package(tmp_path / "lc" / "other")
    (tmp_path / "lc" / "common").mkdir()
    (tmp_path / "lc" / "common" / "testlib.h").write_text("// v1\n")

    def key(path: str) -> str:
        r = Recipe.model_validate({
            "name": "r", "problems": {"name": "lc", "domain": "code", "format": "problem_package",
                                      "source": {"path": path}},
            "teachers": [{"name": "pool", "engine": "pool", "source": {"path": path}, "match": "order"}],
            "export": {"name": "d"}})  # fmt: skip
        return load.node(r, tmp_path).key

    one, all_ = key("lc/aplusb"), key("lc")
    (tmp_path / "lc" / "other" / "checker.cpp").write_text("// another checker\n")
    assert key("lc/aplusb") == one  # a sibling package is not read
    (tmp_path / "lc" / "common" / "testlib.h").write_text("// v2\n")
    assert key("lc/aplusb") != one
    assert key("lc") != all_
    node = load.node(Recipe.model_validate({
        "name": "r", "problems": {"name": "lc", "domain": "code", "format": "problem_package",
                                  "source": {"path": "lc/aplusb"}},
        "teachers": [{"name": "pool", "engine": "pool", "source": {"path": "lc/aplusb"}, "match": "order"}],
        "export": {"name": "d"}}), tmp_path)  # fmt: skip
    assert node.stage.compute(None, **node.params.compute_args()).num_rows == 1
    (tmp_path / "lc" / "common" / "testlib.h").write_text("// v3, while the build ran\n")
    with pytest.raises(DataError, match="changed while the build was running"):
        node.stage.compute(None, **node.params.compute_args())
