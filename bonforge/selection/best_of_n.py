"""Best-of-N over scored answers (open-ended problems), shared by the ``bon`` stage, FusioN's pools (the
hard filter) and the fused answers' comparison: an answer's usable scores, why the hard filter leaves it
out, and the pick with its deterministic tie rule."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from bonforge.scoring.config import BonFilter


def ok_values(rows: Iterable[dict]) -> dict[str, dict[str, float]]:
    """candidate_id -> scorer -> value, of score rows (candidate_id, scorer, value, status) with status ok."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for r in rows:
        if r["status"] == "ok" and r["value"] is not None:
            out[r["candidate_id"]][r["scorer"]] = r["value"]
    return out


def excluded(ok: dict[str, float], filt: BonFilter) -> str | None:
    """Why the hard filter leaves out an answer with these scores (scorer -> value, status ok): ``language``
    (not in the expected language), ``min:<scorer>`` (below that scorer's minimum), or ``None`` (kept)."""
    if filt.language and ok.get(filt.language) != 1.0:
        return "language"
    return next((f"min:{s}" for s, m in sorted(filt.min.items()) if ok.get(s, float("-inf")) < m), None)


def pick(values: dict[str, float]) -> tuple[str, float, float | None, bool]:
    """The best (candidate_id, value) of ``values``, the best value among the others, and whether the best
    value is shared (then the lowest candidate_id wins)."""
    best = max(values.values())
    winners = sorted(c for c, v in values.items() if v == best)
    others = [v for c, v in values.items() if c != winners[0]]
    return winners[0], best, (max(others) if others else None), len(winners) > 1
