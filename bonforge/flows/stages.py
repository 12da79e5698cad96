"""The stages of a build: each computes its key from its config and upstream keys, then runs (or reuses)
its table through ``bonforge.runner``. Plain functions; ``build.py`` wraps each call in a Prefect task.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable
from functools import partial
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bonforge import data
from bonforge.config import PoolTeacher, Recipe
from bonforge.runner import ensure_ray, run_stage
from bonforge.storage.store import StageStore, stage_key
from bonforge.tasks import assemble, export, fuse, load, score, verify_math

log = logging.getLogger("bonforge")

# Rows per shard of the sharded stages: part of the code, not of the config or the key (how a stage is split
# never changes its output; a rerun under another split starts the stage over, see StageStore.begin).
VERIFY_SHARD_ROWS = 256
VERDICT_FILE_ROWS = 100_000  # committed verdicts are read from files of this size, not from thousands of shards
SCORE_SHARD_ROWS = 200_000
ASSEMBLE_SHARD_ROWS = 50_000


@dataclass
class Ref:
    """A committed stage output: its name, key and manifest."""

    stage: str
    key: str
    manifest: dict = field(repr=False)


@dataclass
class Step:
    """A stage ready to run: its key is known before anything is computed (Prefect's cache key)."""

    stage: str
    key: str
    label: str
    run: Callable[[], dict] = field(repr=False)


@dataclass
class Build:
    store: StageStore
    recipe: Recipe
    recipe_dir: Path

    def _ray(self) -> None:
        ensure_ray(self.recipe.ray.address, self.recipe.ray.num_cpus)

    def read(self, ref: Ref, columns: list[str] | None = None) -> pa.Table:
        return self.store.read(ref.stage, ref.key, columns)

    def _files(self, refs: list[Ref]) -> list[str]:
        return [str(p) for r in refs for p in self.store.paths(r.stage, r.key)]

    # -- stages --------------------------------------------------------------------------------------
    def problems(self) -> Step:
        cfg = self.recipe.problems
        key = stage_key("problems", load.VERSION, cfg.key_config(), {})
        return Step(
            "problems",
            key,
            "problems",
            lambda: run_stage(
                self.store,
                "problems",
                key,
                version=load.VERSION,
                config=cfg.key_config(),
                upstream={},
                table=pa.table({"problem_id": pa.array([], pa.string())}),
                compute=lambda _t: load.load_problems(cfg, data.resolve(cfg.source, self.recipe_dir)),
                label="problems",
            ),
        )

    def candidates(self, problems: Ref, teacher) -> Step:
        label = f"candidates[{teacher.name}]"
        if not isinstance(teacher, PoolTeacher):
            from bonforge.tasks import sample

            key = sample.stage_key_for(problems.key, teacher)
            return Step(
                "candidates",
                key,
                label,
                lambda: sample.sample_stage(self.store, self.read(problems), problems.key, teacher),
            )
        from bonforge.llm.pool import import_pool

        cfg = teacher.key_config()
        key = stage_key("candidates", "pool-1", cfg, {"problems": problems.key})
        return Step(
            "candidates",
            key,
            label,
            lambda: run_stage(
                self.store,
                "candidates",
                key,
                version="pool-1",
                config=cfg,
                upstream={"problems": problems.key},
                table=pa.table({"problem_id": pa.array([], pa.string())}),
                compute=lambda _t: import_pool(
                    teacher, data.resolve(teacher.source, self.recipe_dir), self.read(problems)
                ),
                label=label,
                extra={"teacher": teacher.name},
            ),
        )

    def reference(self, problems: Ref) -> Step:
        """The problems' reference solutions as a teacher named ``reference`` (``include_reference``)."""
        from bonforge.tasks.load_code import reference_candidates

        upstream = {"problems": problems.key}
        key = stage_key("candidates", "reference-1", {"teacher": "reference"}, upstream)
        return Step(
            "candidates",
            key,
            "candidates[reference]",
            lambda: run_stage(
                self.store,
                "candidates",
                key,
                version="reference-1",
                config={"teacher": "reference"},
                upstream=upstream,
                table=pa.table({"problem_id": pa.array([], pa.string())}),
                compute=lambda _t: reference_candidates(self.read(problems)),
                label="candidates[reference]",
                extra={"teacher": "reference"},
            ),
        )

    def verdicts(self, problems: Ref, candidates: Ref) -> Step:
        domains = set(self.read(problems, ["domain"]).column("domain").to_pylist())
        teacher = candidates.manifest.get("teacher", "")
        upstream = {"problems": problems.key, "candidates": candidates.key}
        if domains == {"code"}:
            from bonforge.tasks import verify_code

            cfg = self.recipe.verify.code
            key = stage_key("verdicts", verify_code.VERSION, cfg.key_config(), upstream)
            compute, executor, version = partial(_verify_code_shard, cfg=cfg), "ray", verify_code.VERSION
        else:
            cfg = self.recipe.verify.math
            key = stage_key("verdicts", verify_math.VERSION, cfg.key_config(), upstream)
            compute, executor, version = partial(_verify_math_shard, cfg=cfg), "ray", verify_math.VERSION

        def run() -> dict:
            if executor == "ray" and not self.store.exists("verdicts", key):
                self._ray()
            return run_stage(
                self.store,
                "verdicts",
                key,
                version=version,
                config=cfg.key_config(),
                upstream=upstream,
                table=lambda: self.read(candidates),
                compute=compute,
                context=lambda: {"problems": self.read(problems)},
                shard_rows=VERIFY_SHARD_ROWS,
                compact_rows=VERDICT_FILE_ROWS,
                executor=executor,
                label=f"verdicts[{teacher}]",
                extra={"teacher": teacher},
            )

        return Step("verdicts", key, f"verdicts[{teacher}]", run)

    def problem_stats(self, verdicts: list[Ref]) -> Step:
        upstream = {"verdicts": _keys(verdicts)}
        cfg = {"score": self.recipe.score.key_config(), "filter": self.recipe.filter.key_config()}
        key = stage_key("problem_stats", score.VERSION, cfg, upstream)
        columns = "problem_id, teacher, candidate_id, correct, reward, extracted"
        table = lambda: duckdb.connect().read_parquet(self._files(verdicts)).select(columns).to_arrow_table()  # noqa
        return Step(
            "problem_stats",
            key,
            "problem_stats",
            lambda: run_stage(
                self.store,
                "problem_stats",
                key,
                version=score.VERSION,
                config=cfg,
                upstream=upstream,
                table=table,
                compute=partial(score.score, score_cfg=self.recipe.score, filter_cfg=self.recipe.filter),
                shard_rows=SCORE_SHARD_ROWS,
                label="problem_stats",
            ),
        )

    def genselect(self, problems: Ref, candidates: list[Ref], verdicts: list[Ref], stats: Ref) -> Step:
        upstream = {
            "problems": problems.key,
            "problem_stats": stats.key,
            "candidates": _keys(candidates),
            "verdicts": _keys(verdicts),
        }
        cfg = assemble.key_config(self.recipe.genselect, self.recipe.seed)
        key = stage_key("genselect", assemble.VERSION, cfg, upstream)
        table = partial(self._kept_keys, problems, candidates, verdicts, stats)
        return Step(
            "genselect",
            key,
            "genselect",
            lambda: run_stage(
                self.store,
                "genselect",
                key,
                version=assemble.VERSION,
                config=cfg,
                upstream=upstream,
                table=table,
                compute=partial(_assemble_shard, cfg=self.recipe.genselect, seed=self.recipe.seed),
                context=lambda: {"con": self._pool_view(problems, candidates, verdicts, stats)},
                shard_rows=ASSEMBLE_SHARD_ROWS,
                label="genselect",
                extra=lambda shards: {
                    "prompts_dropped_too_long": self._shard_note(key, len(shards), b"dropped_too_long"),
                    "candidates_dropped_too_long": self._shard_note(key, len(shards), b"candidates_too_long"),
                },
            ),
        )

    def _shard_note(self, key: str, n_shards: int, note: bytes) -> int:
        """A count the genselect shards note in their metadata (prompts over ``genselect.max_tokens``,
        candidates over ``genselect.max_candidate_tokens``), summed."""
        paths = (self.store.shard_path("genselect", key, i) for i in range(n_shards))
        return sum(int((pq.read_schema(p).metadata or {}).get(note, 0)) for p in paths)

    def _kept_keys(self, problems: Ref, candidates: list[Ref], verdicts: list[Ref], stats: Ref) -> pa.Table:
        """The keys of the kept problems' candidates: the shard plan. Each shard reads its own texts."""
        con = self._pool_view(problems, candidates, verdicts, stats)
        return con.sql(
            "SELECT c.problem_id, c.candidate_id FROM c JOIN s ON s.problem_id = c.problem_id AND s.teacher = '*' "
            "AND s.keep"
        ).to_arrow_table()

    # -- fusion ----------------------------------------------------------------------------------------
    def fusion_pools(self, problems: Ref, candidates: list[Ref], verdicts: list[Ref], stats: Ref) -> Step:
        cfg = self.recipe.fusion
        key_cfg = fuse.pools_key_config(cfg)
        upstream = {"problems": problems.key, "candidates": _keys(candidates), "verdicts": _keys(verdicts)}
        if cfg.problems == "kept":
            upstream["problem_stats"] = stats.key
        key = stage_key("fusion_pools", fuse.POOLS_VERSION, key_cfg, upstream)

        def table() -> pa.Table:
            con = self._pool_view(problems, candidates, verdicts, stats)
            kept = (
                "JOIN s ON s.problem_id = c.problem_id AND s.teacher = '*' AND s.keep" if cfg.problems == "kept" else ""
            )
            return con.sql(
                f"""
                SELECT c.problem_id, p.question, p.domain, c.candidate_id, c.teacher, c.text, v.status
                FROM c JOIN v USING (candidate_id) JOIN p ON p.problem_id = c.problem_id {kept}
                WHERE c.teacher IN (SELECT unnest(?))
            """,
                params=[sorted(cfg.teachers)],
            ).to_arrow_table()

        return Step(
            "fusion_pools",
            key,
            "fusion_pools",
            lambda: run_stage(
                self.store,
                "fusion_pools",
                key,
                version=fuse.POOLS_VERSION,
                config=key_cfg,
                upstream=upstream,
                table=table,
                compute=partial(fuse.build_pools, cfg=cfg),
                shard_rows=ASSEMBLE_SHARD_ROWS,
                label="fusion_pools",
            ),
        )

    def fused(self, pools: Ref) -> Step:
        """The fusor's answers: a candidates stage whose 'problems' are the rendered pools."""
        from bonforge.tasks import sample

        teacher = fuse.fusor_teacher(self.recipe.fusion)
        key = sample.stage_key_for(pools.key, teacher)
        prompts = lambda: self.read(pools, ["problem_id", "domain", "question"])  # noqa: E731
        return Step(
            "candidates",
            key,
            f"candidates[{teacher.name}]",
            lambda: sample.sample_stage(self.store, prompts(), pools.key, teacher),
        )

    def fusion_select(self, problems: Ref, pools: Ref, candidates: list[Ref], verdicts: list[Ref]) -> Step:
        """The configured selector picks one candidate of each fusion pool (GenSelect on the same pools)."""
        from bonforge.tasks import assemble, select_eval

        cfg = self.recipe.fusion
        key_cfg = {
            "selector": select_eval.selector_key(cfg.selector),
            "genselect": assemble.key_config(self.recipe.genselect, self.recipe.seed),
        }
        upstream = {"fusion_pools": pools.key, "candidates": _keys(candidates), "verdicts": _keys(verdicts)}
        key = stage_key("fusion_select", fuse.FUSION_VERSION, key_cfg, upstream)

        def prompts() -> pa.Table:
            con = self._pool_view(problems, candidates, verdicts, None)
            members = con.sql(
                "SELECT c.candidate_id, c.text, v.correct, v.extracted FROM c JOIN v USING (candidate_id)"
            ).to_arrow_table()
            questions = dict(con.sql("SELECT problem_id, question FROM p").fetchall())
            return fuse.selection_prompts(self.read(pools), members, questions, self.recipe.genselect)

        def run() -> dict:
            judge = select_eval.Judge(cfg.selector, runs=1, skip_unanimous=False)
            try:
                return run_stage(
                    self.store,
                    "fusion_select",
                    key,
                    version=fuse.FUSION_VERSION,
                    config=key_cfg,
                    upstream=upstream,
                    table=prompts,
                    compute=judge,
                    label="fusion_select",
                )
            finally:
                judge.close()

        return Step("fusion_select", key, "fusion_select", run)

    def fusion(
        self,
        problems: Ref,
        pools: Ref,
        candidates: list[Ref],
        verdicts: list[Ref],
        fused: Ref,
        fused_verdicts: Ref,
        selection: Ref | None,
    ) -> Step:
        cfg = self.recipe.fusion
        upstream = {
            "fusion_pools": pools.key,
            "candidates": _keys(candidates),
            "verdicts": _keys(verdicts),
            "fused": fused.key,
            "fused_verdicts": fused_verdicts.key,
        }
        if selection is not None:
            upstream["fusion_select"] = selection.key
        key = stage_key("fusion", fuse.FUSION_VERSION, {"min_span": cfg.min_span}, upstream)

        def run() -> dict:
            con = self._pool_view(problems, candidates + [fused], verdicts + [fused_verdicts], None)
            members = con.sql(
                "SELECT c.candidate_id, c.teacher, c.text, v.correct, v.extracted FROM c JOIN v USING (candidate_id)"
            ).to_arrow_table()
            answers = con.sql(
                "SELECT c.problem_id, c.candidate_id, c.text, v.correct, v.status "
                "FROM c JOIN v USING (candidate_id) WHERE c.teacher = ?",
                params=[cfg.fusor.name],
            ).to_arrow_table()
            picks = self.read(selection, ["problem_id", "correct"]) if selection is not None else None
            return run_stage(
                self.store,
                "fusion",
                key,
                version=fuse.FUSION_VERSION,
                config={"min_span": cfg.min_span},
                upstream=upstream,
                table=self.read(pools),
                compute=partial(fuse.analyze, members=members, fused=answers, min_span=cfg.min_span, selection=picks),
                label="fusion",
                extra=lambda shards: {
                    "comparison": fuse.comparison(self.store.read_shards("fusion", key, len(shards)))
                },
            )

        return Step("fusion", key, "fusion", run)

    def export_fusion(self, problems: Ref, fused: Ref, fused_verdicts: Ref, lineage: dict) -> dict:
        from bonforge.storage.datasets import publish

        con = self._pool_view(problems, [fused], [fused_verdicts], None)
        table = con.sql(
            "SELECT c.problem_id, p.question, c.candidate_id, c.text, v.correct "
            "FROM c JOIN v USING (candidate_id) JOIN p ON p.problem_id = c.problem_id"
        ).to_arrow_table()
        exp = self.recipe.fusion.export
        trainers = export.trainers(None, "trl/train.parquet", sft=True)
        return publish(self.store.root, exp.name, fuse.sft_tables(table, exp.only_correct), lineage, trainers)

    def _pool_view(self, problems: Ref, candidates: list[Ref], verdicts: list[Ref], stats: Ref | None):
        con = duckdb.connect()
        con.read_parquet(self._files([problems])).create_view("p")
        con.read_parquet(self._files(candidates), union_by_name=True).create_view("c")
        con.read_parquet(self._files(verdicts), union_by_name=True).create_view("v")
        if stats is not None:
            con.read_parquet(self._files([stats])).create_view("s")
        return con

    def export(self, genselect: Ref, lineage: dict) -> dict:
        from bonforge.storage.datasets import publish

        shards = (pq.read_table(p) for p in self.store.paths(genselect.stage, genselect.key))
        formats = self.recipe.export.formats
        parts = export.stream(shards, formats, data_source=f"bonforge/{self.recipe.name}")
        max_tokens = self.recipe.genselect.max_tokens
        trainers = export.trainers("genselect", "verl/train.parquet", max_tokens) if "verl" in formats else None
        return publish(self.store.root, self.recipe.export.name, parts, lineage, trainers)

    def export_rl(self, problems: Ref, candidates: list[Ref], verdicts: list[Ref], stats: Ref, lineage: dict) -> dict:
        """The RL dataset of the kept problems (``export.rl``), with the reward of the recipe's domain."""
        from bonforge import templates
        from bonforge.storage.datasets import publish

        cfg, domain = self.recipe.export.rl, self.recipe.problems.domain
        prompt = templates.load(cfg.template, f"sample_{domain}.txt", ("{question}",), "export.rl.template")
        # the policy answers the sampling template in a fenced block: `auto` also reads completions
        code = self.recipe.verify.code.model_copy(update={"extraction": "auto"})
        verify = {"math": self.recipe.verify.math, "code": code}
        con = self._pool_view(problems, candidates, verdicts, stats)
        parts = export.rl_parts(con, f"bonforge/{self.recipe.problems.name}", {domain: prompt}, verify)
        return publish(self.store.root, cfg.name, parts, lineage, export.trainers(domain, "rl/train.parquet"))


def _keys(refs: list[Ref]) -> str:
    return ",".join(sorted(r.key for r in refs))


def _assemble_shard(keys: pa.Table, con, cfg, seed: int) -> pa.Table:
    """GenSelect rows of the kept problems in one shard (a problem_id range of ``keys``)."""
    lo, hi = pc.min(keys.column("problem_id")).as_py(), pc.max(keys.column("problem_id")).as_py()
    pool = con.sql(
        """
        SELECT c.problem_id, p.question, p.domain, c.candidate_id, c.text, v.correct, v.status
        FROM c JOIN v USING (candidate_id) JOIN p ON p.problem_id = c.problem_id
        JOIN s ON s.problem_id = c.problem_id AND s.teacher = '*' AND s.keep
        WHERE c.problem_id BETWEEN $lo AND $hi AND v.problem_id BETWEEN $lo AND $hi
        ORDER BY c.problem_id, c.candidate_id
        """,
        params={"lo": lo, "hi": hi},
    ).to_arrow_table()
    return assemble.assemble(pool, cfg, seed)


def _verify_math_shard(cands: pa.Table, problems: pa.Table, cfg) -> pa.Table:
    return verify_math.verify_math(cands, problems, cfg)


def _verify_code_shard(cands: pa.Table, problems: pa.Table, cfg) -> pa.Table:
    """Inside Ray: the node's shared sandbox pool (one per node for all workers); else this process's."""
    import ray

    from bonforge.sandbox.pool import shared_pool
    from bonforge.sandbox.ray_pool import node_pool
    from bonforge.tasks import verify_code

    pool = node_pool(cfg) if ray.is_initialized() else shared_pool(cfg)
    return verify_code.verify_code(problems, cands, cfg, pool=pool)
