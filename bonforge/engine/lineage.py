"""What a dataset version records of the build that made it (its manifest's lineage, its card's header): the
recipe as resolved and its ``--set`` overrides, the bonforge version, the stage keys, the source files by
content, and the build's summary (problems in, kept, dropped by reason; candidates; verdicts by status:
``bonforge.report.summary``)."""

from __future__ import annotations

from importlib import metadata

from bonforge.config import Recipe
from bonforge.report.summary import build_summary
from bonforge.storage.store import StageStore

_SOURCE_STAGES = ("problems", "candidates")  # the stages keyed by a source file's content


def lineage(store: StageStore, recipe: Recipe, stages: dict[str, list[str]]) -> dict:
    out = {
        "recipe": recipe.name,
        "overrides": list(recipe.overrides),
        "bonforge_version": version(),
        "resolved_recipe": recipe.model_dump(mode="json", exclude={"overrides"}),
        "stages": {stage: list(keys) for stage, keys in stages.items()},
        "sources": sources(store, recipe, stages),
    }
    if recipe.export.license:
        out["license"] = recipe.export.license
    if summary := build_summary(store, stages):
        out["summary"] = summary
    return out


def version() -> str:
    """The installed bonforge's version (its package metadata)."""
    try:
        return metadata.version("bonforge")
    except metadata.PackageNotFoundError:
        return "unknown"


def sources(store: StageStore, recipe: Recipe, stages: dict[str, list[str]]) -> list[dict]:
    """The files the build read, each with the content digest its stage was keyed by."""
    named = {"problems": recipe.problems.source} | {
        f"teacher {t.name}": t.source for t in recipe.teachers if getattr(t, "source", None) is not None}
    out = []
    for stage in _SOURCE_STAGES:
        for key in stages.get(stage, []):
            man = store.manifest(stage, key)
            content = man.config.get("source") if isinstance(man.config, dict) else None
            if not isinstance(content, dict):
                continue  # sampled candidates, reference solutions: no file of their own
            role = "problems" if stage == "problems" else f"teacher {man.extra.get('teacher')}"
            src = named.get(role)
            out.append({"role": role, "path": src and src.path, "url": src and src.url, "content": content})
    return out
