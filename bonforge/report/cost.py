"""What a build cost (docs/cost.md): per teacher, per stage and per kept row, from the ``cost`` each stage
output's manifest records (``bonforge.tables.cost``).

Two figures, never mixed: ``rows_usd`` is the cost of the rows the build's outputs hold, each as recorded when
it was made (a row reused from an earlier build carries its own cost); ``spent_usd`` is what this build paid
(a stage found committed, and every reused row, cost nothing now). Per kept row is ``rows_usd`` over the
dataset's rows: what one training row cost, counting the dropped samples that paid for it.
"""

from __future__ import annotations

import html

from bonforge.storage.store import StageStore
from bonforge.tables.cost import add, per_kept_row


def build_cost(store: StageStore, stages: dict[str, list[str]], cached: dict[str, list[str]] | None = None,
               kept: int | None = None) -> dict | None:
    """The cost of the committed outputs of ``stages`` (a run's map), None when none records one; ``cached``:
    the outputs this build found committed (without it, no ``spent_usd``: a dataset's manifest states what its
    rows cost, not what one build paid); ``kept``: the dataset's rows."""
    out: dict = {"teachers": {}, "stages": {}}
    for stage, keys in stages.items():
        for key in keys:
            man = store.manifest(stage, key) if store.exists(stage, key) else None
            cost = man.extra.get("cost") if man is not None else None
            if not isinstance(cost, dict):
                continue
            spent = None if cached is None else key not in cached.get(stage, [])
            add(out, cost, spent)
            add(out["stages"].setdefault(stage, {}), cost, spent)
            if stage == "candidates":
                teacher = out["teachers"].setdefault(str(man.extra.get("teacher")), {})
                add(teacher, cost, spent)
                teacher["tokens"] = man.extra.get("tokens")
    if not out["stages"]:
        return None
    return per_kept_row(out, kept) if kept is not None else out


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}" if value < 100 else f"${value:,.2f}"


def _of(part: dict, key: str) -> str:
    """``part[key]`` in dollars: "at least" where some of its rows have a price and some none (those count
    nothing in it)."""
    value, some = part.get(key), part.get("unpriced_rows") and part.get("rows_usd") is not None
    return f"at least {_usd(value)}" if value is not None and some else _usd(value)


def _unpriced(part: dict) -> str:
    return f", {part['unpriced_rows']} rows without a price" if part.get("unpriced_rows") else ""


def cost_lines(cost: dict) -> list[str]:
    """The cost in words: one line in all, one per teacher."""
    kept = (f", {_of(cost, 'per_kept_row_usd')} per kept row ({cost['kept_rows']} rows)"
            if cost.get("per_kept_row_usd") is not None else "")
    spent = (f"; spent in this build {_of(cost, 'spent_usd')} (reused rows cost nothing now)"
             if "spent_usd" in cost else "")
    lines = [f"cost: {_of(cost, 'rows_usd')} of rows{kept}{spent}{_unpriced(cost)}"]
    for name, t in cost.get("teachers", {}).items():
        per = f", {_of(t, 'per_kept_row_usd')} per kept row" if t.get("per_kept_row_usd") is not None else ""
        gpu = f", {t['gpu_s']:.1f} GPU-s" if t.get("gpu_s") else ""
        spent = f", spent {_of(t, 'spent_usd')}" if "spent_usd" in t else ""
        lines.append(f"  teacher {name}: {_of(t, 'rows_usd')}{per}{spent}{gpu}{_unpriced(t)}")
    return lines


def cost_section(cost: dict | None) -> str:
    """The report's section: per teacher and per stage, the cost of the rows, per kept row and spent in this
    build (empty where no price was stated)."""
    if not cost or cost.get("rows_usd") is None:
        return ""
    head = "".join(f"<th>{h}</th>" for h in ("", "cost of the rows", "per kept row", "spent in this build"))
    rows = [("all", cost)] + [(f"teacher {n}", t) for n, t in cost.get("teachers", {}).items()] + [
        (f"stage {n}", st) for n, st in cost.get("stages", {}).items()]
    body = "".join(f"<tr><td>{html.escape(name)}</td>" + "".join(
        f"<td>{_of(part, k) if k in part else ''}</td>" for k in ("rows_usd", "per_kept_row_usd", "spent_usd"))
        + "</tr>" for name, part in rows)
    kept = f" over {cost['kept_rows']} kept rows" if cost.get("kept_rows") else ""
    return (f'<section id="cost"><h2>Cost{kept}</h2><table><tr>{head}</tr>{body}</table><details><summary>what '
            "the figures are</summary>the cost of the rows counts every row (the dropped samples too) as recorded "
            "when it was made; spent in this build leaves out reused rows and committed stages (docs/cost.md)"
            "</details></section>")
