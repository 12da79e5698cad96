"""Row-level reuse across builds of one store, counted in requests to a real OpenAI-compatible server and in
the rows each stage computed: only what is new is paid for, and a build that reuses rows publishes the same
dataset content as a build from scratch."""

from __future__ import annotations

import json

import pytest
from llm_server import ScriptedServer, adder
from typer.testing import CliRunner

from bonforge.cli import app
from bonforge.storage.store import StageStore

N = 4
pytestmark = pytest.mark.slow  # Prefect + Ray start-up, several builds


solver = adder("At t={temperature}: so the answer is \\boxed{{{value}}}.")  # the text depends on the temperature


def write_problems(folder, name: str, count: int, reverse: bool = False, gold: dict[int, str] | None = None) -> str:
    """A problems file with stable ids (the problems key covers the file's bytes: an edit in place is new)."""
    rows = [{"id": f"q{i:03d}", "question": f"What is {i} + {2 * i}?", "answer": (gold or {}).get(i, str(3 * i))}
            for i in range(1, count + 1)]
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in (rows[::-1] if reverse else rows)))
    return f"problems.source.path={name}"


def write_recipe(path, url: str, name: str = "reuse", temperature: float = 0.6) -> None:
    path.write_text(f"""
name: {name}
problems: {{name: toy, source: {{path: problems.jsonl}}, fields: {{id: id}}}}  # --set to others
teachers:
  - {{name: served, engine: openai, model: m, base_url: "{url}", api_key_env: null, n: {N}, max_tokens: 64,
     temperature: {temperature}, shard_problems: 4}}
export: {{name: toy-genselect}}
""")


class Builds:
    """`bonforge run` of the recipe in one store; each build returns its run record."""

    def __init__(self, tmp_path, server: ScriptedServer, store: str = "store"):
        self.dir, self.server, self.store = tmp_path, server, StageStore(tmp_path / store)

    def run(self, *args: str) -> dict:
        result = CliRunner().invoke(app, ["run", str(self.dir / "recipe.yaml"), "--store", str(self.store.root), *args])
        assert result.exit_code == 0, result.output
        return self.store.run()

    def dataset_sha(self, record: dict) -> str:
        return json.loads((self.store.root / record["dataset"] / "manifest.json").read_text())["content_sha256"]


def rows(record: dict, label: str) -> dict:
    return record["rows"][label]


def test_reuse_pays_only_for_what_is_new(tmp_path, shared_prefect):
    with ScriptedServer(solver) as server:
        write_recipe(tmp_path / "recipe.yaml", server.url)
        builds = Builds(tmp_path, server)
        write_problems(tmp_path, "problems.jsonl", 22)
        first = builds.run("--set", "problems.limit=20")
        assert server.count == 20 * N
        assert rows(first, "candidates[served]") == {"computed": 20 * N, "reused": 0}

        grown = builds.run("--set", "problems.limit=22")  # +10 % problems: their samples and verdicts only
        assert server.count == 22 * N
        assert rows(grown, "candidates[served]") == {"computed": 2 * N, "reused": 20 * N}
        assert rows(grown, "verdicts[served]") == {"computed": 2 * N, "reused": 20 * N}

        scratch = Builds(tmp_path, server, "scratch")  # the same build from scratch: the same dataset content
        from_scratch = scratch.run("--set", "problems.limit=22")
        assert server.count == 44 * N
        assert builds.dataset_sha(grown) == scratch.dataset_sha(from_scratch)
        assert grown["stages"] == from_scratch["stages"]  # the stage keys do not depend on reuse

        reordered = write_problems(tmp_path, "reordered.jsonl", 22, reverse=True)
        builds.run("--set", reordered)  # the same problems in another order: nothing new
        write_recipe(tmp_path / "recipe.yaml", server.url, name="another")  # another recipe, another filter
        builds.run("--set", reordered, "--set", "filter.max_pass_rate=0.75")
        builds.run("--set", "problems.limit=15")  # a subset
        assert server.count == 44 * N

        fixed_gold = write_problems(tmp_path, "problems.jsonl", 22, gold={7: "0"})  # one gold fixed, in place
        fixed = builds.run("--set", fixed_gold)
        assert server.count == 44 * N
        assert rows(fixed, "candidates[served]") == {"computed": 0, "reused": 22 * N}
        assert rows(fixed, "verdicts[served]") == {"computed": N, "reused": 21 * N}

        verify_changed = builds.run("--set", fixed_gold, "--set", "verify.math.float_rounding=3")
        assert server.count == 44 * N  # re-verified, not re-sampled
        assert rows(verify_changed, "verdicts[served]") == {"computed": 22 * N, "reused": 0}

        write_recipe(tmp_path / "recipe.yaml", server.url, name="another", temperature=0.7)
        hotter = builds.run("--set", fixed_gold)  # a sampling setting changed: re-sampled, and new texts judged
        assert server.count == 66 * N
        assert rows(hotter, "candidates[served]") == {"computed": 22 * N, "reused": 0}
        assert rows(hotter, "verdicts[served]") == {"computed": 22 * N, "reused": 0}

        again = builds.run("--set", fixed_gold, "--fresh")  # nothing taken from the store, committed stages too
        assert server.count == 88 * N
        assert rows(again, "candidates[served]") == {"computed": 22 * N, "reused": 0}
        assert rows(again, "verdicts[served]") == {"computed": 22 * N, "reused": 0}
        assert again["stages"] == hotter["stages"] and builds.dataset_sha(again) == builds.dataset_sha(hotter)
    runs = CliRunner().invoke(app, ["runs", "--store", str(builds.store.root)])
    assert runs.exit_code == 0 and "reused" in runs.output, runs.output
