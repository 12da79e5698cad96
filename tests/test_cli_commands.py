"""The command line's own behaviour: its version, flags that read as flags, help that names only a command's
own options, command lists with whole summaries, tables that never cut an id, JSON that a program can read, and
a derived command that says why it wrote nothing."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from bonforge import __version__
from bonforge.cli import app
from bonforge.storage.run_record import RunRecord
from bonforge.storage.store import StageStore


def invoke(*argv: str, **kw):
    return CliRunner().invoke(app, list(argv), **kw)


def test_version():
    res = invoke("--version")
    assert res.exit_code == 0 and res.output.strip() == f"bonforge {__version__}"


def _commands(group, path=()):
    import typer.main

    click_group = typer.main.get_command(group) if not path else group
    for name, cmd in click_group.commands.items():
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*path, name))
        else:
            yield (*path, name)


def test_flags_have_no_metavar():
    """`--debug` is a flag: the help shows no value after it (never `--debug <bool>`), in every command."""
    commands = list(_commands(app))
    assert ("run",) in commands and ("sandbox", "cleanup") in commands
    for cmd in commands:
        res = invoke(*cmd, "--help", env={"COLUMNS": "200"})
        assert res.exit_code == 0, (cmd, res.output)
        assert "bool>" not in res.output.lower() and "BOOLEAN" not in res.output, (cmd, res.output)
    assert "  --debug  " in invoke("run", "--help", env={"COLUMNS": "200"}).output


def _click(cmd: tuple[str, ...]):
    import typer.main

    found = typer.main.get_command(app)
    for name in cmd:
        found = found.commands[name]
    return found


def test_no_help_names_an_option_its_command_lacks():
    """`maxk --help` and `report --help` once spoke of a `--run` they do not take: every option a command's help
    names (in its own text or its options') is one of its own."""
    import re

    for cmd in list(_commands(app)):
        res = invoke(*cmd, "--help", env={"COLUMNS": "200"})
        own = {o for p in _click(cmd).params for o in p.opts + p.secondary_opts} | {"--help"}
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", res.output))
        assert named <= own, (cmd, named - own)


def test_the_command_lists_show_every_summary_whole():
    """`bonforge --help` (and each group's) lists every command with its whole summary, on one line of an
    80-column terminal: nothing cut to `...`."""
    for group in ((), ("sandbox",), ("models",)):
        out = invoke(*group, "--help", env={"COLUMNS": "80"}).output
        listed = out.split("Commands:", 1)[1]
        assert "..." not in listed, listed
        for name, cmd in (_click(group).commands.items()):
            summary = cmd.short_help or cmd.help
            assert f"  {name} " in listed and summary in " ".join(listed.split()), (group, name, listed)
            assert all(len(line) <= 80 for line in listed.splitlines()), listed
        assert len(listed.strip().splitlines()) == len(_click(group).commands), listed  # one line each


def _store_with_run(tmp_path, run_id: str, **fields) -> StageStore:
    store = StageStore(tmp_path / "store")
    store.record_run(RunRecord.from_json({"run_id": run_id, "recipe_name": "r", "recipe": {"name": "r"},
                                          "status": "succeeded",
                      "started": "2026-01-01T00:00:00Z", "stages": {}, "cached": {}, **fields}))
    return store


def test_runs_never_cuts_a_run_id(tmp_path):
    long_path = "/a/rather/long/store/path/" + "x" * 120 + "/datasets/gsm8k-genselect/v12"
    ids = [f"20260101T0000{i:02d}-abcdef" for i in range(3)]
    for i in ids:
        store = _store_with_run(tmp_path, i, dataset=long_path, wall_s=12.5)
    res = invoke("runs", "--store", str(store.root), env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    for i in ids:
        assert i in res.output, res.output


def test_json_prints_blobs_as_base64(tmp_path):
    store = _store_with_run(tmp_path, "r1")
    res = invoke("sql", "SELECT '\\x00\\xffab'::BLOB AS b, [('\\x01'::BLOB)] AS l", "--format", "json",
                 "--store", str(store.root))
    assert res.exit_code == 0, res.output
    row = json.loads(res.output)
    assert base64.b64decode(row["b"]) == b"\x00\xffab" and base64.b64decode(row["l"][0]) == b"\x01"


def _verdicts_run(tmp_path) -> StageStore:
    """A run whose verdicts hold one candidate per (problem, teacher): two teachers, three problems."""
    store = StageStore(tmp_path / "store")
    rows = [(f"p{i}", t, f"p{i}-{t}", float((i + j) % 2), "passed" if (i + j) % 2 else "wrong_answer")
            for i in range(3) for j, t in enumerate(("a", "b"))]
    names = ("problem_id", "teacher", "candidate_id", "reward", "status")
    table = pa.table({k: list(v) for k, v in zip(names, zip(*rows))})
    store.begin("verdicts", "v1", [table.num_rows])
    store.write_shard("verdicts", "v1", 0, table)
    store.commit("verdicts", "v1", 1, version="1", config={}, upstream={})
    store.record_run(RunRecord.from_json({"run_id": "r1", "recipe_name": "r", "recipe": {"name": "r"},
                                          "status": "succeeded",
                      "started": "2026-01-01T00:00:00Z", "stages": {"verdicts": ["v1"]}, "cached": {}}))
    return store


def test_maxk_on_one_sample_teachers_says_why_and_points_at_pool(tmp_path):
    store = _verdicts_run(tmp_path)
    res = invoke("maxk", "r1", "--k", "2", "--store", str(store.root))
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        "error: run r1 has at most 1 candidates per problem and teacher: no weights for k = 2 (--pool weighs "
        "every teacher's candidates of a problem together)"]
    res = invoke("maxk", "r1", "--k", "2", "--pool", "--store", str(store.root))
    assert res.exit_code == 0 and ", 6 rows" in res.output, res.output


def test_runs_of_a_run_names_the_teacher_of_each_stage(tmp_path):
    """`runs --run` lists one `verdicts` line per teacher: each says whose it is."""
    store = StageStore(tmp_path / "store")
    table = pa.table({"problem_id": ["p0"], "candidate_id": ["p0/x/0"]})
    for key, teacher in (("va", "qwen-math-7b"), ("vb", "llama-8b")):
        store.write_shard("verdicts", key, 0, table)
        store.commit("verdicts", key, 1, version="1", config={}, upstream={}, extra={"teacher": teacher})
    store.record_run(RunRecord.from_json({"run_id": "r1", "recipe_name": "r", "recipe": {"name": "r"},
                                          "status": "succeeded",
                      "started": "2026-01-01T00:00:00Z", "stages": {"verdicts": ["va", "vb"]}, "cached": {}}))
    res = invoke("runs", "--run", "r1", "--store", str(store.root), env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    rows = [line for line in res.output.splitlines() if "verdicts" in line]
    assert len(rows) == 2 and "llama-8b" in rows[0] and "qwen-math-7b" in rows[1], res.output


def test_maxk_warns_about_the_ks_it_cannot_weigh(tmp_path, caplog):
    import logging

    store = _verdicts_run(tmp_path)
    with caplog.at_level(logging.WARNING, "bonforge"):
        res = invoke("maxk", "r1", "--k", "1", "--k", "2", "--store", str(store.root))
    assert res.exit_code == 0 and ", 6 rows" in res.output, res.output  # k = 1: one weight per candidate
    assert "run r1 has at most 1 candidates per problem and teacher: no weights for k = 2 (--pool" in caplog.text


def _run_printing(tmp_path, monkeypatch, created: str, report_run: str) -> str:
    """`bonforge run`'s closing lines for a build (stubbed) whose dataset version was created at ``created``
    and whose report is run ``report_run``'s."""
    from bonforge.storage.datasets import publish
    from bonforge.storage.run_record import utc_now

    store = tmp_path / "store"
    man = publish(store, "d", {"plain": pa.table({"x": [1]})}, {})
    path = store / "datasets" / "d" / "v1" / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "created": created}))
    record = RunRecord("new", "r", {"name": "r"}, {}, {}, "succeeded", utc_now(), dataset=man["path"],
                       dataset_version=1, report=str(store / "reports" / report_run / "report.html"))
    monkeypatch.setattr("bonforge.flows.build.build", lambda *a, **k: record)
    res = invoke("run", str(Path(__file__).resolve().parents[1] / "recipes" / "gsm8k-genselect.yaml"), "--store",
                 str(store))
    assert res.exit_code == 0, res.output
    return res.output


def test_a_reused_dataset_version_and_report_are_announced(tmp_path, monkeypatch):
    """A filter change can land on an older version's content: the line says it is that version, reused, and
    that `latest` names it now; a build that computed nothing says whose report it prints."""
    out = _run_printing(tmp_path, monkeypatch, "2020-01-01T00:00:00Z", "old")
    assert "dataset d v1 at " in out and " (1 row) (reused" in out
    assert ("(reused: the same content as v1, built 2020-01-01T00:00:00Z; datasets/d/latest names it now)"
            in out), out
    assert out.rstrip().endswith("report.html (run old's, which built the same stages)"), out


def test_a_new_dataset_version_and_its_own_report_say_nothing_more(tmp_path, monkeypatch):
    out = _run_printing(tmp_path, monkeypatch, "2999-01-01T00:00:00Z", "new")
    assert "reused" not in out and out.rstrip().endswith("reports/new/report.html"), out


GSM8K = Path(__file__).resolve().parents[1] / "recipes" / "gsm8k-genselect.yaml"


@pytest.mark.parametrize("text, args, line", [
    (b"name: x\nseed: \xff\n", [], "error: {path}: line 2: byte 0xff is not UTF-8 text (save the file as UTF-8)"),
    (b"name: x\nname: y\n", [], "error: {path}: line 2, column 1: key 'name' given twice (first on line 1)"),
    (b"name: [x\nseed: 1\n", [], "error: {path}: line 2, column 5: expected ',' or ']', but got ':'"),
    (b"a: " + b"[" * 5000 + b"]" * 5000, [], "error: {path}: line 1, column 67: nested more than 64 levels deep"),
    (None, ["--set", "export.name=.."], "error: {path}: invalid recipe: export.name: a name must be 1 to 100 letters, "
                                        "digits, '.', '_' or '-', starting with a letter or digit, not '..'"),
    (None, ["--set", "export.name=" + "n" * 300], "error: {path}: invalid recipe: export.name: a name must be 1 to 100 "
     "letters, digits, '.', '_' or '-', starting with a letter or digit, not '" + "n" * 76 + "... (300 characters)"),
    (None, ["--set", "filter.max_pass_rate = 0.3"], "error: --set 'filter.max_pass_rate = 0.3': expected "
     "KEY.PATH=VALUE with no space around '=' or in the key (quote the whole option where VALUE holds spaces: "
     "--set 'a.b=x y')"),
    (None, ["--set", "seed=[1"], "error: --set 'seed': line 1, column 3: expected ',' or ']', but got '<stream end>'"),
], ids=["utf8", "twice", "broken", "deep", "dotdot", "300", "spaces", "bad-set"])  # fmt: skip
def test_a_bad_recipe_is_one_error_line_before_any_work(tmp_path, text, args, line):
    path = GSM8K
    if text is not None:
        path = tmp_path / "r.yaml"
        path.write_bytes(text)
    res = invoke("run", str(path), *args, "--store", str(tmp_path / "store"))
    assert res.exit_code == 2 and res.output.splitlines() == [line.format(path=path)], res.output
    assert not (tmp_path / "store").exists()  # nothing written


def test_set_split_by_the_shell_is_refused_not_applied(tmp_path):
    res = invoke("run", str(GSM8K), "--set", "filter.max_pass_rate", "=", "0.3", "--store", str(tmp_path / "store"))
    assert res.exit_code == 2 and "Got unexpected extra argument" in res.output and not (tmp_path / "store").exists()


def test_a_dataset_name_outside_the_grammar_is_one_error_line(tmp_path):
    for name in ("..", "../x", "a/b"):
        res = invoke("datasets", name, "--store", str(tmp_path / "store"))
        assert res.exit_code == 2 and res.output.splitlines() == [
            f"error: a dataset name must be 1 to 100 letters, digits, '.', '_' or '-', starting with a letter or "
            f"digit, not {name!r}"], res.output
    assert invoke("datasets", "gsm8k", "--store", str(tmp_path / "store")).output.startswith("no dataset named")
