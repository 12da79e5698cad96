"""The build's DAG, and nothing else:

    problems ─► candidates (per teacher) ─► verdicts (per teacher) ─► problem_stats ─► genselect ─► dataset
                    └─(fusion)─► fusion_pools ─► fused candidates ─► verdicts ─► fusion ─► SFT dataset
    open-ended problems (domain: open, no gold answer):
    problems ─► candidates (per teacher) ─► scores (per teacher) ─► bon ─► (pairwise) ─► Best-of-N SFT dataset
                    └─(fusion)─► fusion_pools (hard filter) ─► fused candidates ─► scores ─► fusion_open ─► SFT

Each stage declares itself in its module under ``bonforge.stages`` (``STAGE`` and ``node()``); ``run`` turns a
node into a ``Ref`` (``bonforge.engine``: the committed-store fast path, else one Prefect task per node with
Ray inside); with ``engine.streaming`` the nodes run at once and a ref may be still computing (``run.wait``
where the DAG reads data). A new stage is one module plus one line here. With a ``decontaminate`` section a
``contamination`` stage first names the problems to leave out. With ``filter.early_stop`` the candidates and
verdicts are drawn in rounds (``bonforge.flows.rounds``) and ``problem_stats`` reads the last round's table.
"""

from __future__ import annotations

from pathlib import Path

from bonforge import engine
from bonforge.config import PoolTeacher, Recipe
from bonforge.flows import rounds
from bonforge.storage.run_record import RunRecord
from bonforge.errors import EmptyDataset
from bonforge.storage import export
from bonforge.stages import (assemble, bon, decontaminate, fuse, fuse_open, load, load_pool, pairwise,
                             problem_stats, sample, scores, verify)


def dag(recipe: Recipe, run: engine.Run, recipe_dir: Path) -> dict:
    contamination = run(decontaminate.node(recipe, recipe_dir)) if recipe.decontaminate else None
    problems = run(load.node(recipe, recipe_dir, contamination))
    if recipe.filter.early_stop:  # sampling and verification in rounds (bonforge.flows.rounds)
        domains = run.values(problems, "domain")
        candidates, verdicts, plan = rounds.sampled(recipe, run, problems, domains)
    else:
        candidates = [run(load_pool.node(recipe_dir, problems, t) if isinstance(t, PoolTeacher)
                          else sample.node(problems, t, sandbox=recipe.verify.code)) for t in recipe.teachers]
        if recipe.problems.include_reference:
            candidates.append(run(load_pool.reference_node(problems)))
        if recipe.problems.domain == "open":
            return open_ended(recipe, run, problems, candidates)
        domains = run.values(problems, "domain")
        verdicts, plan = [run(verify.node(recipe, problems, c, domains)) for c in candidates], None
    strength = candidates if domains == {"code"} else None  # the labels give code problems their suite strength
    stats = run(problem_stats.node(recipe, verdicts, plan, strength))
    # the reference solutions (appended last) enter GenSelect prompts only where the recipe asks
    own = -1 if recipe.problems.include_reference and not recipe.genselect.include_reference_candidates else None
    genselect = run.wait(run(assemble.node(recipe, problems, candidates[:own], verdicts[:own], stats)))
    if not genselect.manifest.rows and not recipe.export.allow_empty:
        counts = problem_stats.filter_counts(run.inputs(problem_stats=stats))
        raise EmptyDataset(counts, genselect.manifest.extra["prompts_dropped_too_long"])
    shards = run.inputs(genselect=genselect).tables("genselect")
    dataset = run.publish(recipe.export.name, export.stream(shards, recipe.export.formats, f"bonforge/{recipe.name}"),
                          export.genselect_trainers(recipe))
    if recipe.export.rl:
        kept = run.inputs(problems=problems, candidates=candidates, verdicts=verdicts, problem_stats=stats)
        dataset["rl_dataset"] = run.publish(recipe.export.rl.name, *export.rl_dataset(kept, recipe))
    if recipe.export.sft:
        models = -1 if recipe.problems.include_reference else None  # the reference solutions are no teacher's
        kept = run.inputs(problems=problems, candidates=candidates[:models], verdicts=verdicts[:models],
                          problem_stats=stats)
        dataset["sft_dataset"] = run.publish(recipe.export.sft.name, export.sft_dataset(kept), export.sft_trainers())
    if recipe.fusion:
        pools = run(fuse.pools_node(recipe, problems, candidates, verdicts, stats))
        fused = run(sample.fusor_node(pools, fuse.fusor_teacher(recipe.fusion), sandbox=recipe.verify.code))
        fused_verdicts = run(verify.node(recipe, problems, fused, domains))
        selection = recipe.fusion.selector and run(fuse.select_node(recipe, problems, pools, candidates, verdicts))
        run(fuse.fusion_node(recipe, pools, candidates, verdicts, fused, fused_verdicts, selection))
        sft = fuse.sft_parts(run.inputs(problems=problems, candidates=fused, verdicts=fused_verdicts),
                             recipe.fusion.export)
        dataset["fusion_dataset"] = run.publish(recipe.fusion.export.name, sft, export.sft_trainers())
    return dataset


def open_ended(recipe: Recipe, run: engine.Run, problems, candidates: list) -> dict:
    """Problems without a gold answer: every candidate scored, Best-of-N picked by a scorer, its SFT export."""
    scored = [run(scores.node(recipe, problems, c)) for c in candidates]
    picks = run(bon.node(recipe, scored))
    fused = recipe.fusion and fuse_open_ended(recipe, run, problems, candidates, scored)
    if recipe.evaluate:
        run(pairwise.node(recipe, problems, candidates + ([fused[0]] if fused else []), picks))
    kept = run.inputs(problems=problems, candidates=candidates, bon=picks)
    dataset = run.publish(recipe.export.name, bon.sft_parts(kept), export.sft_trainers())
    if recipe.bon.preferences:
        dataset["preference_dataset"] = run.publish(recipe.bon.preferences, bon.preference_parts(kept),
                                                    export.preference_trainers())
    if fused:
        sft = fuse_open.sft_parts(run.inputs(problems=problems, candidates=fused[0], scores=fused[1]),
                                  recipe.bon.filter)
        dataset["fusion_dataset"] = run.publish(recipe.fusion.export.name, sft, export.sft_trainers())
    return dataset


def fuse_open_ended(recipe: Recipe, run: engine.Run, problems, candidates: list, scored: list) -> tuple:
    """FusioN over the answers the hard filter keeps; the fused answers scored like every candidate and set
    beside Best-of-N on the same pools. Returns the fused candidates and their scores."""
    pools = run(fuse.open_pools_node(recipe, problems, candidates, scored))
    fused = run(sample.fusor_node(pools, fuse.fusor_teacher(recipe.fusion), sandbox=recipe.verify.code))
    fused_scores = run(scores.node(recipe, problems, fused))
    run(fuse_open.node(recipe, pools, candidates, scored, fused, fused_scores))
    return fused, fused_scores


def build(recipe: Recipe, store_root: str, recipe_dir: str = ".", run_id: str | None = None) -> RunRecord:
    """Build the recipe's dataset and return the run record."""
    return engine.build(dag, recipe, store_root, recipe_dir, run_id)
