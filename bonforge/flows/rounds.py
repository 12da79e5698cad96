"""Exact early stopping (``filter.early_stop``), the DAG of its rounds: each round's table
(``bonforge.stages.rounds``) says what every teacher draws; the round's samples are the ordinary sampling and
verification stages over the problems that draw (one batch per teacher and round, the samples drawn before taken
by row reuse); the next round's table reads their verdicts. When a round draws nothing, each teacher's final
candidates (every sample it holds) and their verdicts are the same stages again, every row reused.

Each round is committed stage outputs, so a build killed inside a round resumes there, and a later build (a larger
n, or early stopping off) takes every sample already drawn from the store and draws only the others. The
run's record names the rounds tables and the final candidates and verdicts (its catalog views); the rounds'
own samples appear in its timings and rows, labelled ``...@round<r>``. A ``vllm`` teacher's model loads once for
all the rounds where the cluster holds every such teacher at once, a ``transformers`` teacher's on CPU always
(``bonforge.llm.held``).

With ``engine.streaming``, the first round's sampling stage that asks for samples has every sample drawn without
rounds (``bonforge.flows.early``: each problem asks for its next samples as soon as its verdicts are in, the
engines' batches full); the rounds' stages then find them drawn and judged (the same samples: the same stages,
keys and bytes)."""

from __future__ import annotations

from dataclasses import replace

from bonforge import engine
from bonforge.config import Recipe
from bonforge.flows import early
from bonforge.llm.held import HeldEngines
from bonforge.stage import Node, Ref
from bonforge.stages import rounds, sample, verify


def sampled(recipe: Recipe, run: engine.Run, problems: Ref, domains: set) -> tuple[list[Ref], list[Ref], Ref]:
    """Every teacher's candidates and verdicts, drawn in rounds; and the last round's table (for
    ``problem_stats``). The ``vllm`` and ``transformers`` teachers' engines are lent to every round's sampling stage
    and closed when the rounds end or fail (``bonforge.llm.held``: when they are held)."""
    tools = recipe.verify.code  # where a teacher's tool calls run
    with HeldEngines(list(recipe.teachers)) as held:
        engines, judged, drawing = {t.name: held.engine(t) for t in recipe.teachers}, None, None
        if recipe.engine.streaming:
            drawing = early.Drawing(recipe, run.store, problems, engines, domains)
            engines = {t.name: early.Prefetched(t, drawing, engines[t.name]) for t in recipe.teachers}
            judged = drawing.judged
        plan = run.wait(run(rounds.node(recipe.teachers, recipe.filter, problems)))
        if drawing is not None:
            drawing.begins(plan)
        while plan.manifest.extra["sampling"]:
            r = plan.manifest.extra["round"]
            drawn = [run(_in_round(sample.round_node(problems, plan, t, engine=engines[t.name], sandbox=tools), r))
                     for t in recipe.teachers if plan.manifest.extra["sampling"].get(t.name)]
            verdicts = [run(_in_round(verify.node(recipe, problems, c, domains, judged), r)) for c in drawn]
            plan = run.wait(run(rounds.node(recipe.teachers, recipe.filter, problems, plan, verdicts)))
        candidates = [run(sample.round_node(problems, plan, t, final=True, engine=engines[t.name], sandbox=tools))
                      for t in recipe.teachers]
        candidates = [run.wait(c) for c in candidates]  # committed before the engines close
        if drawing is not None:
            drawing.forget(candidates)
    verdicts = [run(verify.node(recipe, problems, c, domains, judged)) for c in candidates]
    return candidates, verdicts, plan


def _in_round(node: Node, round_: int) -> Node:
    """A node of round ``round_``: its own label (timings, rows), and left out of the run's stage tables (the
    catalog's views hold the final candidates and verdicts only; the keys are unchanged)."""
    return replace(node, label=f"{node.label}@round{round_}", note={**node.note, "round": round_})
